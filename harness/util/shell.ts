/**
 * Command lines the harness prints for a person to paste ("reproduce: ..."): every argument quoted so
 * that bash reads back the same argv, whatever a subject path or a value holds (spaces, quotes, `$`,
 * backticks, `;`, newlines, control characters).
 */

/** Characters that need no quoting in any POSIX shell word. */
const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** One argument as a shell word: as it is when safe, in single quotes, or as $'...' when it holds control characters. */
export function shellQuote(arg: string): string {
  if (arg !== "" && SAFE.test(arg)) return arg;
  if (!CONTROL.test(arg)) return `'${arg.replace(/'/g, `'\\''`)}'`;
  let out = "$'";
  for (const ch of arg) {
    const code = ch.codePointAt(0)!;
    if (ch === "\\" || ch === "'") out += `\\${ch}`;
    else if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return `${out}'`;
}

/** A command line from a program (given as it is: `npx clip-parity cell`) and its arguments, each quoted. */
export function commandLine(program: string, args: readonly (string | number | boolean)[]): string {
  return [program, ...args.map((a) => shellQuote(String(a)))].join(" ");
}

/**
 * Control characters in text that a result file carries (cell ids, subject names, check messages), shown
 * as visible escapes (\x1b, \x00, \u202e) wherever the text is printed, so that it cannot clear a
 * terminal, move its cursor, retitle it, or hide text behind a bidi override. Error messages that name
 * a cell use it too (schema.ts); the reporters build on it (reports/escape.ts).
 */

/** C0 and C1 controls, DEL, and the bidi and line-separator characters that reorder or split a line. */
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const NAMED: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function controlEscape(ch: string): string {
  const code = ch.charCodeAt(0);
  if (NAMED[ch]) return NAMED[ch];
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/** Control characters as escapes (\n, \t, \x1b, \u202e); those in `keep` (e.g. "\n\t") stay as they are. */
export function escapeControls(text: string, keep = ""): string {
  return text.replace(CONTROLS, (ch) => (keep.includes(ch) ? ch : controlEscape(ch)));
}

/** Lines for a terminal: newlines and tabs kept (CRLF as one newline), every other control escaped. */
export function terminalText(text: string): string {
  return escapeControls(text.replace(/\r\n/g, "\n"), "\n\t");
}

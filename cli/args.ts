/**
 * The one argument parser of the command line: every command declares its flags once (type, value
 * placeholder, description), and gets both strict parsing (node:util.parseArgs: unknown flags and
 * missing values are errors) and its `--help` text from that declaration.
 *
 * Numbers follow one documented grammar, decimal only: integers are digits (`0`, `42`), real numbers
 * are digits with an optional fraction and exponent (`1`, `0.5`, `1e-3`). Hexadecimal, `Infinity`,
 * empty strings and values that overflow are refused with the flag, the value and the rule.
 */
import { didYouMean, nearest } from "../harness/util/did-you-mean.ts";
import { parseArgs } from "node:util";
import { InputError } from "../harness/errors.ts";
import { formatPin, normalizePins, parsePin, withPins, type Pin } from "../harness/external/torch/environments.ts";

export interface FlagSpec {
  type: "string" | "boolean";
  multiple?: boolean;
  /** The value's placeholder in --help, e.g. "NAME|FILE". */
  value?: string;
  description: string;
  required?: boolean;
  /** Required unless one of these flags is given (cell: unless --file). */
  requiredUnless?: readonly string[];
  /** The value the parser gives the flag when it is absent, and what --help shows: the one place it is written. */
  default?: string;
  /** A default the command works out itself (the cores, half the RAM, the matrix's own): shown in --help, never applied. */
  defaultText?: string;
}

export interface CommandSpec {
  name: string;
  /** One line: what the command does. */
  summary: string;
  flags: Record<string, FlagSpec>;
  /** Extra paragraphs after the flag list (exit status, examples). */
  notes?: string;
  /** Arguments without a flag, e.g. `merge --out FILE FILE...`: their placeholder in the usage line. */
  positionals?: string;
}

export type Values = Record<string, string | boolean | string[] | undefined>;

export const EXIT_STATUS = "exit status: 0 every check passed, 1 a check failed, 2 bad input";

export const NUMBER_GRAMMAR =
  "numbers are decimal: integers are digits only (0, 42); real numbers may have a fraction and an exponent (0.5, 1e-3)";

function flagUsage(name: string, f: FlagSpec): string {
  const v = f.type === "string" ? ` ${f.value ?? "VALUE"}` : "";
  return `--${name}${v}${f.multiple ? "..." : ""}`;
}

/** One line per command for the top-level usage: `name  required flags [optional flags]`. */
export function usageLine(spec: CommandSpec): string {
  const parts = Object.entries(spec.flags)
    .filter(([name]) => name !== "help")
    .map(([name, f]) => (f.required || f.requiredUnless ? flagUsage(name, f) : `[${flagUsage(name, f)}]`));
  return `${spec.name} ${parts.join(" ")}${spec.positionals ? ` ${spec.positionals}` : ""}`;
}

export function helpText(spec: CommandSpec): string {
  const rows = Object.entries(spec.flags).map(([name, f]) => {
    const required = f.required ? "required" : f.requiredUnless ? `required unless ${f.requiredUnless.map((x) => `--${x}`).join(" or ")}` : "";
    const shownDefault = f.default ?? f.defaultText;
    const extra = [required, shownDefault !== undefined ? `default ${shownDefault}` : ""].filter(Boolean).join("; ");
    return [flagUsage(name, f), `${f.description}${extra ? ` (${extra})` : ""}`];
  });
  const width = Math.max(...rows.map((r) => r[0]!.length));
  const lines = rows.map(([a, b]) => `  ${a!.padEnd(width)}  ${b}`);
  return `usage: clip-parity ${usageLine(spec)}\n\n${spec.summary}\n\n${lines.join("\n")}\n\n${NUMBER_GRAMMAR}\n${spec.notes ? `${spec.notes}\n` : ""}`;
}

/** Strict parse; errors are InputError (exit 2) naming the command and showing its usage. */
export function parseCommand(spec: CommandSpec, argv: string[]): Values {
  return parseCommandLine(spec, argv).values;
}

/** parseCommand for commands that take positionals (spec.positionals). */
export function parseCommandLine(spec: CommandSpec, argv: string[]): { values: Values; positionals: string[] } {
  const options: Record<string, { type: "string" | "boolean"; multiple?: boolean }> = {};
  for (const [name, f] of Object.entries(spec.flags)) options[name] = { type: f.type, ...(f.multiple ? { multiple: true } : {}) };
  options.help ??= { type: "boolean" };
  let values: Values;
  let positionals: string[];
  try {
    const r = parseArgs({ args: argv, options, strict: true, allowPositionals: spec.positionals !== undefined });
    values = r.values as Values;
    positionals = r.positionals;
  } catch (err) {
    const e = err as Error & { code?: string };
    const unknown = e.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" ? /'-{1,2}([^']+)'/.exec(e.message)?.[1] : undefined;
    if (unknown !== undefined) throw unknownFlagError(spec.name, unknown, Object.keys(options))!;
    throw new InputError(`${spec.name}: ${e.message}\nusage: clip-parity ${usageLine(spec)}\n(clip-parity ${spec.name} --help for details)`);
  }
  if (values.help) return { values, positionals };
  const given = new Set(Object.keys(values).filter((k) => values[k] !== undefined));
  // every missing flag at once: one round trip, not one per flag
  const missing = Object.entries(spec.flags).filter(([name, f]) => {
    if (given.has(name)) return false;
    if (f.required) return true;
    return f.requiredUnless !== undefined && !f.requiredUnless.some((other) => given.has(other));
  });
  if (missing.length) {
    const unless = [...new Set(missing.flatMap(([, f]) => f.requiredUnless ?? []))];
    const names = missing.map(([name]) => `--${name}`).join(", ");
    throw new InputError(
      `${spec.name}: missing ${names} (required${unless.length ? ` unless ${unless.map((x) => `--${x}`).join(" or ")} is given` : ""})\nusage: clip-parity ${usageLine(spec)}`,
    );
  }
  for (const [name, f] of Object.entries(spec.flags)) if (f.default !== undefined && values[name] === undefined) values[name] = f.default;
  GIVEN.set(values, given);
  return { values, positionals };
}

const GIVEN = new WeakMap<Values, ReadonlySet<string>>();

/** Whether a flag was on the command line (its default, if any, does not count). */
export function given(v: Values, flag: string): boolean {
  const set = GIVEN.get(v);
  return set ? set.has(flag) : v[flag] !== undefined;
}

/** The flags given on the command line, in the spec's order. */
export function givenFlags(v: Values): string[] {
  return Object.keys(v).filter((k) => given(v, k));
}

/**
 * The one-line error for a flag a command does not know (exit 2), with the nearest known flag as a
 * suggestion. With `onlyNear`, null unless one is near: `npm test` passes other flags on to vitest.
 */
export function unknownFlagError(command: string, flag: string, known: readonly string[], opts: { onlyNear?: boolean } = {}): InputError | null {
  const near = nearest(flag, known.filter((k) => k !== "help"));
  if (near === undefined && opts.onlyNear) return null;
  const help = command === "npm test" ? "npm test -- --help" : `clip-parity ${command} --help`;
  return new InputError(`${command}: unknown flag --${flag}${near ? `; did you mean --${near}?` : ""} (${help} lists the flags)`);
}

/** A string flag's value (the last one when repeated by mistake is not possible: parseArgs keeps one). */
export function str(v: Values, flag: string): string | undefined {
  const x = v[flag];
  if (x === undefined || typeof x === "boolean") return undefined;
  return Array.isArray(x) ? x[x.length - 1] : x;
}

export function list(v: Values, flag: string): string[] | undefined {
  const x = v[flag];
  if (x === undefined || typeof x === "boolean") return undefined;
  return Array.isArray(x) ? x : [x];
}

const INTEGER = /^[0-9]+$/;
const REAL = /^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$/;

/** A non-negative decimal integer within [min, max]. */
export function parseInteger(text: string, flag: string, range: { min?: number; max?: number } = {}): number {
  const min = range.min ?? 0;
  const max = range.max ?? Number.MAX_SAFE_INTEGER;
  const n = Number(text);
  if (!INTEGER.test(text) || !Number.isSafeInteger(n)) {
    throw new InputError(`${flag}: "${text}" is not a decimal integer (digits only, at most 2^53-1)`);
  }
  if (n < min || n > max) throw new InputError(`${flag}: ${text} is outside ${min}..${max}`);
  return n;
}

/** A finite positive decimal real number (digits, optional fraction and exponent). */
export function parsePositiveReal(text: string, flag: string): number {
  const x = Number(text);
  if (!REAL.test(text)) throw new InputError(`${flag}: "${text}" is not a decimal number (e.g. 1, 0.5, 1e-3)`);
  if (!Number.isFinite(x)) throw new InputError(`${flag}: ${text} overflows a float64 (the largest finite value is about 1.8e308)`);
  if (!(x > 0)) throw new InputError(`${flag}: ${text} is not positive`);
  return x;
}

/** The p of a p-norm: "inf", or a finite positive decimal number. */
export function parseNormType(text: string, flag = "--norm"): number {
  if (text === "inf") return Infinity;
  try {
    return parsePositiveReal(text, flag);
  } catch {
    throw new InputError(`${flag}: "${text}" is not 2, 1, inf or a positive decimal number`);
  }
}

export function parseBoolean(text: string, flag: string): boolean {
  if (text === "true") return true;
  if (text === "false") return false;
  throw new InputError(`${flag}: "${text}" is not true or false`);
}

/** A regular expression from a flag (`--filter RE`); one that does not compile is bad input naming the flag and the value. */
export function parseRegExp(text: string, flag: string): RegExp {
  try {
    return new RegExp(text);
  } catch (err) {
    throw new InputError(`${flag}: "${text}" is not a regular expression (${(err as Error).message})`);
  }
}

/** A value that must be one of `allowed`. */
export function parseChoice<T extends string>(text: string, flag: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(text)) throw new InputError(`${flag}: "${text}" is not one of ${allowed.join(", ")}${didYouMean(text, allowed)}`);
  return text as T;
}

/**
 * `--matrix NAME` runs a whole section (resume, train): it takes `--json` and nothing else, so a
 * cell flag given beside it is refused instead of silently ignored.
 */
export function assertOnlyJsonWithMatrix(v: Values, positionals: readonly string[], section: string): void {
  const other = givenFlags(v).filter((k) => k !== "matrix" && k !== "json" && k !== "subject" && k !== "timeout-s");
  if (other.length || positionals.length) {
    throw new InputError(`--matrix runs a whole ${section} section; it takes only --json, --subject and --timeout-s (got ${other.map((o) => `--${o}`).concat(positionals).join(", ")})`);
  }
}

/** The `--with PKG==VER` flag of the commands that run torch: subjects: one declaration, one parse. */
export const WITH_FLAG: FlagSpec = {
  type: "string",
  multiple: true,
  value: "PKG==VER",
  description: "run torch: subjects with this release (repeatable; torch==X too), in an environment built from the package registry and cached",
};

/** The releases `--with` names (empty when not given); InputError naming the flag and the value. */
export function withPinsOf(v: Values): Pin[] {
  return normalizePins((list(v, "with") ?? []).map((t) => parsePin(t, "--with")), "--with");
}

/** Every torch: subject of `specs` with `pins` added; InputError when pins are given and no subject is torch:. */
export function applyWith(specs: readonly string[], pins: readonly Pin[]): string[] {
  if (!pins.length) return [...specs];
  if (!specs.some((s) => s.startsWith("torch:"))) {
    throw new InputError(`--with ${pins.map(formatPin).join(" --with ")}: releases apply to torch: subjects, and the run has none (subjects: ${specs.join(", ")})`);
  }
  return specs.map((s) => withPins(s, pins));
}

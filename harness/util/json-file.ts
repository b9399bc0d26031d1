/**
 * The one way the harness reads a JSON input (a matrix, a fuzz case, the regressions, a golden, a result
 * file, a framework convention): parsed, validated against its zod schema, and on any problem one
 * InputError (exit 2) that names what it is, where it is, and the first fields that are wrong with the
 * schema's message, never a stack trace from inside zod or JSON.parse.
 */
import { readFileSync } from "node:fs";
import type { z } from "zod";
import { InputError } from "../errors.ts";
import { escapeControls } from "./controls.ts";

/** A zod issue's field as a reader writes it: `cases[3].layout.tp`, or "(top level)". */
export function issuePath(path: readonly PropertyKey[]): string {
  return path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("").replace(/^\./, "") || "(top level)";
}

/** The first issues of a failed validation, one indented `field: message` line each. */
export function issueLines(error: z.ZodError, max = 5): string[] {
  const lines = error.issues.slice(0, max).map((i) => `  ${issuePath(i.path)}: ${i.message}`);
  if (error.issues.length > max) lines.push(`  ... and ${error.issues.length - max} more`);
  return lines;
}

/** "`what` is not `kind`:" and the first issues, a line each; every part escaped, the line breaks kept. */
export function invalidMessage(what: string, kind: string, error: z.ZodError): string {
  return [`${what} is not ${kind}:`, ...issueLines(error)].map((l) => escapeControls(l)).join("\n");
}

/**
 * `text` parsed as JSON and validated against `schema`. `what` names the input in errors ("matrix file
 * m.json"); `kind` says what it should have been ("a valid fuzz case file"; default "valid"). Text from the
 * input is escaped: it ends up on a terminal.
 */
export function parseJsonText<T>(schema: z.ZodType<T>, text: string, what: string, kind = "valid"): T {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new InputError(escapeControls(`${what}: not valid JSON (${(err as Error).message})`));
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new InputError(invalidMessage(what, kind, parsed.error));
  return parsed.data;
}

/** The file at `path`, read and then parsed as parseJsonText does; a file that cannot be read names why. */
export function readJsonFile<T>(schema: z.ZodType<T>, path: string, what: string, kind = "valid"): T {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new InputError(escapeControls(`${what}: cannot read it (${e.code === "ENOENT" ? "no such file" : e.message})`));
  }
  return parseJsonText(schema, text, what, kind);
}

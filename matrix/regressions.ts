/**
 * matrix/regressions.json: fixed regression cells. Each is a fuzz case (harness/fuzz/case.ts: a
 * synthetic model with explicit placements) kept from a shrunk counterexample of the fuzzer, with the
 * bug it caught: the subject module that has the bug and the checks that must fail on it. Every correct
 * subject must pass every cell (suites/strength/regressions.test.ts, and the mutation suite runs them).
 * A bad file is refused with its path, the entry and the field.
 */
import { commandLine } from "../harness/util/shell.ts";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { InputError } from "../harness/errors.ts";
import { caseFromFile, CASE_FILE_FORMAT, type FuzzCase } from "../harness/fuzz/case.ts";
import { parseJsonText } from "../harness/util/json-file.ts";

export const REGRESSIONS_FORMAT = "clip-parity regressions v1";
export const REGRESSIONS_PATH = fileURLToPath(new URL("./regressions.json", import.meta.url));

export interface Regression {
  note: string;
  /** The subject (module path or built-in name) that has the bug, and the checks that catch it. */
  catches: { subject: string; checks: string[] };
  /** The cell, without a subject (a correct subject or `catches.subject` is put in). */
  fuzzCase: Omit<FuzzCase, "subject">;
}

const fileSchema = z.strictObject({
  format: z.literal(REGRESSIONS_FORMAT),
  description: z.string().default(""),
  cells: z.array(
    z.strictObject({
      note: z.string().min(1),
      catches: z.strictObject({ subject: z.string().min(1), checks: z.array(z.string().min(1)).min(1) }),
      case: z.record(z.string(), z.unknown()),
    }),
  ),
});

export function parseRegressions(text: string, where: string): Regression[] {
  return parseJsonText(fileSchema, text, where, "a valid regressions file").cells.map((e, i) => {
    // each case is a fuzz case file without its format and subject: validated by the same schema
    const { subject: _subject, ...c } = caseFromFile(
      JSON.stringify({ format: CASE_FILE_FORMAT, subject: e.catches.subject, ...e.case }),
      `${where} cells[${i}].case`,
    );
    return { note: e.note, catches: e.catches, fuzzCase: c };
  });
}

export function loadRegressions(path: string = REGRESSIONS_PATH): Regression[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new InputError(`regressions file ${path}: ${(err as Error).message}`);
  }
  return parseRegressions(text, `regressions file ${path}`);
}

/** The command that runs regression cell `index` alone with `subject`: a failing case's reproduce line. */
export function regressionRepro(index: number, subject: string): string {
  return commandLine("npx clip-parity cell", ["--regression", String(index), "--subject", subject]);
}

/** The regression cell with a subject put in. */
export function regressionCase(r: Regression, subject: string): FuzzCase {
  return { ...r.fuzzCase, subject };
}

let sections: Record<string, Regression[]> | undefined;

/** The matrices whose whole run also runs the regression cells with each of its subjects: the main job and nightly. */
export function regressionSections(): Record<string, Regression[]> {
  // read and validated once per process: `run`, coverage and the section runner each ask for it
  if (!sections) {
    const regressions = loadRegressions();
    sections = { cpu: regressions, nightly: regressions };
  }
  return sections;
}

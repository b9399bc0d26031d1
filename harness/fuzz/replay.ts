/**
 * Replaying a fuzz case file: `clip-parity cell --file FILE` and `npm run fuzz -- --replay FILE`.
 * The file names its subject; `--subject` runs another one on the same case.
 */
import { readFileSync } from "node:fs";
import { InputError } from "../errors.ts";
import { loadSubject } from "../clip/registry.ts";
import { caseFromFile, describeCase, type FuzzCase } from "./case.ts";
import { runFuzzCase, type FuzzOutcome } from "./run.ts";
import { replayCommand } from "./fuzz.ts";

export function readCaseFile(path: string): FuzzCase {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new InputError(`--file ${path}: ${(err as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (err as Error).message}`);
  }
  return caseFromFile(text, `fuzz case file ${path}`);
}

export async function replayCaseFile(path: string, options: { subject?: string } = {}): Promise<{ fuzzCase: FuzzCase; outcome: FuzzOutcome }> {
  const loaded = readCaseFile(path);
  const fuzzCase = options.subject ? { ...loaded, subject: options.subject } : loaded;
  const subject = await loadSubject(fuzzCase.subject);
  const outcome = await runFuzzCase(fuzzCase, subject, { repro: replayCommand(path) + (options.subject ? ` --subject ${options.subject}` : "") });
  return { fuzzCase, outcome };
}

/** Prints a replayed case like `clip-parity cell` does; returns the exit status (1 = a property failed). */
export async function printReplay(
  path: string,
  options: { subject?: string; out?: NodeJS.WritableStream; memoryTable?: (r: FuzzOutcome["result"]) => string } = {},
): Promise<number> {
  const out = options.out ?? process.stdout;
  const { fuzzCase, outcome } = await replayCaseFile(path, options);
  const r = outcome.result;
  out.write(`${r.id}  (fuzz case ${path})\n  ${describeCase(fuzzCase)}\n`);
  out.write(`  norm ${r.totalNorm}  reference ${r.referenceNorm}  clip_coef ${r.clipCoef}  max_norm ${r.maxNorm}\n`);
  for (const c of r.checks) out.write(`  ${c.status.padEnd(4)} ${c.id}${c.message ? `: ${c.message.replace(/\n/g, "\n       ")}` : ""}\n`);
  const extra = outcome.violations.filter((v) => !r.checks.some((c) => c.id === v.id));
  for (const v of extra) out.write(`  fail ${v.id}: ${v.message}\n`);
  if (options.memoryTable) out.write(options.memoryTable(r));
  return outcome.violations.length ? 1 : 0;
}

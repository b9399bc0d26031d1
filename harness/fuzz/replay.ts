/**
 * Replaying a fuzz case file: `clip-parity cell --file FILE` and `npm run fuzz -- --replay FILE`.
 * The file names its subject; `--subject` runs another one on the same case.
 */
import { shellQuote } from "../util/shell.ts";
import { readFileSync } from "node:fs";
import { InputError } from "../errors.ts";
import type { Subject } from "../subject/api.ts";
import { loadSubject } from "../registry/registry.ts";
import { DEFAULT_TIMEOUT_MS, runJobs, runOneJob, type Job } from "../sandbox/pool.ts";
import { isolatedOutcome, type Isolated, type IsolatedOptions } from "../sandbox/isolated.ts";
import { jobKind, type JobHandlers, type JobTools } from "../execute/job.ts";
import { caseFromFile, describeCase, type FuzzCase } from "./case.ts";
import { runAnyCase, runFuzzCase, type FuzzOutcome } from "./run.ts";
import type { FuzzTrainOutcome } from "./case.ts";
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

export interface Replay {
  fuzzCase: FuzzCase;
  outcome: FuzzOutcome | FuzzTrainOutcome;
}

/** Runs a case file's case here (in a worker, when the pool runs it: `load` is then the worker's loader). */
export async function replayCaseFile(path: string, options: { subject?: string; load?: (spec: string) => Promise<Subject> } = {}): Promise<Replay> {
  const loaded = readCaseFile(path);
  const fuzzCase = options.subject ? { ...loaded, subject: options.subject } : loaded;
  const subject = await (options.load ?? loadSubject)(fuzzCase.subject);
  const outcome = await runAnyCase(fuzzCase, subject, { repro: replayCommand(path) + (options.subject ? ` --subject ${shellQuote(options.subject)}` : "") });
  return { fuzzCase, outcome };
}

export const jobs = {
  replay: async (input: { path: string; subject?: string }, tools: JobTools) => replayCaseFile(input.path, { subject: input.subject, load: tools.subjectFor }),
  regression: async (input: { fuzzCase: FuzzCase; repro: string }, tools: JobTools) =>
    runFuzzCase(input.fuzzCase, await tools.subjectFor(input.fuzzCase.subject), { repro: input.repro }),
} satisfies JobHandlers;

export const REPLAY_JOB = jobKind("replay", import.meta.url);
const REGRESSION_JOB = jobKind("regression", import.meta.url);

/** Prints a replayed case like `clip-parity cell` does; returns the exit status (1 = a property failed). */
export async function printReplay(
  path: string,
  options: { subject?: string; out?: NodeJS.WritableStream; memoryTable?: (r: FuzzOutcome["result"]) => string; heapMb?: number } = {},
): Promise<number> {
  const out = options.out ?? process.stdout;
  readCaseFile(path); // bad input is exit 2 here, before a worker starts
  const o = await runOneJob({ index: 0, kind: REPLAY_JOB.name, module: REPLAY_JOB.module, input: { path, subject: options.subject }, deadlineMs: 4 * DEFAULT_TIMEOUT_MS }, { heapMb: options.heapMb });
  if (o.result === undefined || o.fault !== null) {
    out.write(`fuzz case ${path}\n  fail isolation: ${o.fault ?? "no result"}\n`);
    return 1;
  }
  const { fuzzCase, outcome } = o.result as Replay;
  if ("train" in outcome) return printTrainReplay(`fuzz case ${path}`, fuzzCase, outcome, out);
  return printCaseOutcome(`fuzz case ${path}`, fuzzCase, outcome, out, options.memoryTable);
}

/**
 * Runs one regression cell (a fixed fuzz case of matrix/regressions.json, its subject put in) in a worker, as the
 * regression section does, and prints it like `clip-parity cell`: what a failing case's reproduce line runs.
 */
export async function printRegression(
  fuzzCase: FuzzCase,
  label: string,
  repro: string,
  options: { out?: NodeJS.WritableStream; memoryTable?: (r: FuzzOutcome["result"]) => string; heapMb?: number } = {},
): Promise<number> {
  const out = options.out ?? process.stdout;
  const o = await runOneJob({ index: 0, kind: REGRESSION_JOB.name, module: REGRESSION_JOB.module, input: { fuzzCase, repro }, deadlineMs: 4 * DEFAULT_TIMEOUT_MS }, { heapMb: options.heapMb });
  if (o.result === undefined || o.fault !== null) {
    out.write(`${label}\n  fail isolation: ${o.fault ?? "no result"}\n`);
    return 1;
  }
  return printCaseOutcome(label, fuzzCase, o.result as FuzzOutcome, out, options.memoryTable);
}

/** A case's cell, norms and checks, then any property that failed beside the checks. */
function printCaseOutcome(label: string, fuzzCase: FuzzCase, outcome: FuzzOutcome, out: NodeJS.WritableStream, memoryTable?: (r: FuzzOutcome["result"]) => string): number {
  const r = outcome.result;
  out.write(`${r.id}  (${label})\n  ${describeCase(fuzzCase)}\n`);
  out.write(`  norm ${r.totalNorm}  reference ${r.referenceNorm}  clip_coef ${r.clipCoef}  max_norm ${r.maxNorm}\n`);
  for (const c of r.checks) out.write(`  ${c.status.padEnd(4)} ${c.id}${c.message ? `: ${c.message.replace(/\n/g, "\n       ")}` : ""}\n`);
  const extra = outcome.violations.filter((v) => !r.checks.some((c) => c.id === v.id));
  for (const v of extra) out.write(`  fail ${v.id}: ${v.message}\n`);
  if (memoryTable) out.write(memoryTable(r));
  return outcome.violations.length ? 1 : 0;
}

/** A replayed training case: the layouts, each step's norm, and the train.parity verdict. */
function printTrainReplay(label: string, fuzzCase: FuzzCase, outcome: FuzzTrainOutcome, out: NodeJS.WritableStream): number {
  const t = outcome.train;
  out.write(`${t.id}  (${label})\n  ${describeCase(fuzzCase)}\n`);
  for (const l of t.layouts) out.write(`  ${l.layout}: norms ${l.norms.join(", ") || "-"}\n`);
  out.write(`  ${t.check.status.padEnd(4)} ${t.check.id}: ${t.check.message.replace(/\n/g, "\n       ")}\n`);
  return outcome.violations.length ? 1 : 0;
}

/**
 * Fixed fuzz cases (the regression cells), each in a worker like a cell. `repro` is the command line a
 * failing check's message prints.
 */
export async function regressionsIsolated(inputs: readonly { fuzzCase: FuzzCase; repro: string }[], options: IsolatedOptions = {}): Promise<Isolated<FuzzOutcome>[]> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const jobs: Job[] = inputs.map((input, index) => ({ index, kind: REGRESSION_JOB.name, module: REGRESSION_JOB.module, input, deadlineMs: 4 * timeoutMs }));
  return (await runJobs(jobs, { timeoutMs, heapMb: options.heapMb, workers: options.workers })).map((o) => isolatedOutcome<FuzzOutcome>(o));
}

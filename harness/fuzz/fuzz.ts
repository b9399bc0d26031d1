/**
 * The fuzzer: fast-check properties over fuzz cases, shrinking, and what a failure prints.
 *
 * - `fuzzProperty(subject)`: for a correct subject every property of run.ts must hold; for the
 *   self-test (`targets` given) only the listed ids are judged, so the shrinker keeps a case that
 *   fails one of THOSE checks.
 * - `fuzzParameters(...)`: fast-check parameters with a fixed seed and a reporter that, on failure,
 *   writes the shrunk counterexample as a replay file (case.ts) and throws a message with the seed,
 *   the replay commands, and a `clip-parity cell` command line on a built-in model when the same
 *   failure shows there too. Used by suites/fuzz (through @fast-check/vitest) and by `npm run fuzz`.
 */
import { InputError } from "../errors.ts";
import { commandLine, shellQuote } from "../util/shell.ts";
import { createHash } from "node:crypto";
import { join, relative, resolve } from "node:path";
import { writeFileAtomic } from "../util/fs.ts";
import fc from "fast-check";
import type { Subject } from "../subject/api.ts";
import { validateLayout } from "../layout/layout.ts";
import { runCell } from "../execute/cell.ts";
import { reproCommand, type Cell } from "../cell/cell.ts";
import { caseArb } from "./arbitraries.ts";
import { caseToFile, checkOptimizerCase, describeCase, type FuzzCase, type Violation } from "./case.ts";
import { minimize } from "./minimize.ts";
import { runAnyCase } from "./run.ts";
import { WorkerPool, type SubjectInfo } from "../sandbox/pool.ts";
import { CELL_JOB, type CellJobInput } from "../execute/cell-job.ts";
import type { CellResult } from "../results/types.ts";
import { jobKind, type JobHandlers, type JobTools } from "../execute/job.ts";
import { envValue } from "../util/env.ts";

/** The seed CI uses (stable test names and reproducible runs); CLIP_PARITY_FUZZ_SEED overrides it. */
export const DEFAULT_SEED = 5_050_505;
/** Where counterexamples are written (git-ignored). */
export const DEFAULT_OUT_DIR = ".clip-parity/fuzz";

/** Generated cases per subject of a fuzz run (`--runs`). */
export const DEFAULT_RUNS = 200;
/** Built-in models tried when translating a counterexample into a plain `clip-parity cell` line. */
const BUILTIN_MODELS = ["llama3-debug", "deepseek-v3-debug"];

export function envSeed(): number {
  const text = envValue("CLIP_PARITY_FUZZ_SEED");
  if (text === undefined) return DEFAULT_SEED;
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new InputError(`CLIP_PARITY_FUZZ_SEED: "${text}" is not an integer (the fuzz seed when --seed is not given)`);
  return n;
}

/** A short content hash of the case: its replay file's name. */
export function caseId(c: FuzzCase): string {
  return createHash("sha256").update(caseToFile(c)).digest("hex").slice(0, 10);
}

export function replayPath(c: FuzzCase, outDir: string = DEFAULT_OUT_DIR): string {
  return join(outDir, `${c.subject.replace(/[^A-Za-z0-9_-]/g, "_")}-${caseId(c)}.json`);
}

function shownPath(path: string): string {
  const rel = relative(process.cwd(), resolve(path));
  return rel.startsWith("..") ? resolve(path) : rel;
}

export function replayCommand(path: string): string {
  return `npx clip-parity cell --file ${shellQuote(shownPath(path))}`;
}

/** Thrown by a property: the case broke these properties. */
export class FuzzViolation extends Error {
  constructor(
    readonly fuzzCase: FuzzCase,
    readonly violations: Violation[],
  ) {
    super(violations.map((v) => `${v.id}: ${v.message}`).join("\n"));
    this.name = "FuzzViolation";
  }
}

export interface PropertyOptions {
  /** Judge only these property ids (the self-test: a known-bad subject's catchBy). */
  targets?: readonly string[];
  outDir?: string;
  /** Called after every run of the predicate (shrinking runs included): progress displays. */
  onRun?: () => void;
  /** How the subject was named (a module path for a user subject): what a case file records. */
  subjectSpec?: string;
}

/**
 * Where the cases of a search run, apart from the search itself: the property, fast-check's shrinking, the
 * second minimisation and the verdict run in the caller's thread, never beside the subject. `inThread`
 * runs a Subject object here (the suites' own subjects); `clip-parity fuzz` runs each case as a job of a
 * worker (fuzzIsolated), where the subject's code is sealed off.
 */
export interface FuzzTarget {
  name: string;
  shape?: Subject["shape"];
  /** A case's violations: its cell (or training run) judged as every cell is. */
  violations(c: FuzzCase, repro: string): Promise<Violation[]>;
  /** The checks that fail on `cell`, a built-in model's cell with the same layout, dtype, norm, regime and seed. */
  failedChecks(cell: Cell): Promise<string[]>;
}

/** A Subject object as a target: its cases run in this thread. */
export function inThread(subject: Subject): FuzzTarget {
  return {
    name: subject.name,
    shape: subject.shape,
    violations: async (c, repro) => (await runAnyCase(c, subject, { repro })).violations,
    failedChecks: async (cell) => (await runCell(cell, { subject, timeoutMs: 20_000 })).checks.filter((x) => x.status === "fail").map((x) => x.id),
  };
}

const targetOf = (s: Subject | FuzzTarget): FuzzTarget => ("violations" in s ? s : inThread(s));

/** The predicate: resolves when the case holds every judged property, throws FuzzViolation otherwise. */
export function fuzzPredicate(subject: Subject | FuzzTarget, options: PropertyOptions = {}): (c: FuzzCase) => Promise<void> {
  const target = targetOf(subject);
  return async (c) => {
    options.onRun?.();
    const violations = await target.violations(c, replayCommand(replayPath(c, options.outDir)));
    const judged = options.targets ? violations.filter((v) => options.targets!.includes(v.id)) : violations;
    if (judged.length) throw new FuzzViolation(c, judged);
  };
}

export function fuzzProperty(subject: Subject | FuzzTarget, options: PropertyOptions = {}): fc.IAsyncProperty<[FuzzCase]> {
  const target = targetOf(subject);
  return fc.asyncProperty(caseArb({ subject: options.subjectSpec ?? target.name, shape: target.shape }), fuzzPredicate(target, options));
}

export interface Counterexample {
  fuzzCase: FuzzCase;
  violations: Violation[];
  path: string;
  /** `clip-parity cell` lines on built-in models that fail one of the same checks. */
  builtin: string[];
  message: string;
}

/**
 * The same layout, dtype, norm, regime and seed on each built-in debug model: where one of the
 * violated checks fails there too, the failure is expressible as a plain `clip-parity cell` line.
 */
async function onBuiltinModels(c: FuzzCase, target: FuzzTarget, violations: Violation[]): Promise<string[]> {
  if (c.steps !== undefined) return []; // a training case: its replay file is the way to rerun it
  const ids = new Set(violations.map((v) => v.id));
  const out: string[] = [];
  for (const model of BUILTIN_MODELS) {
    const cell = { subject: c.subject, layout: validateLayout(c.layout), model, dtype: c.dtype, normType: c.normType, regime: c.regime, seed: c.seed, ...(c.errorIfNonfinite !== undefined ? { errorIfNonfinite: c.errorIfNonfinite } : {}) };
    try {
      if ((await target.failedChecks(cell)).some((id) => ids.has(id))) out.push(reproCommand(cell, "cpu"));
    } catch {
      // not expressible there (e.g. a layout the model cannot take): the replay file still is
    }
  }
  return out;
}

/** Writes the replay file of a failing run and builds the message every front end prints. */
export async function explainFailure(
  details: fc.RunDetails<[FuzzCase]>,
  subject: Subject | FuzzTarget,
  options: PropertyOptions & { runsFlag?: string } = {},
): Promise<Counterexample> {
  const target = targetOf(subject);
  const shrunk = details.counterexample![0];
  const error = details.errorInstance;
  const first = violationsOf(error);
  // A second shrinking pass on the case itself, keeping a failure of one of the same properties.
  const ids0 = new Set(first.map((v) => v.id));
  const judge = async (x: FuzzCase): Promise<Violation[]> => {
    try {
      await fuzzPredicate(target, { targets: options.targets, outDir: options.outDir })(x);
      return [];
    } catch (e) {
      return violationsOf(e).filter((v) => ids0.has(v.id));
    }
  };
  const accept = target.shape === "optimizer" ? checkOptimizerCase : undefined;
  const min = await minimize(shrunk, async (x) => (await judge(x)).length > 0, undefined, accept);
  const c = min.fuzzCase;
  const violations = min.kept ? await judge(c) : first;
  const path = replayPath(c, options.outDir);
  const ids = [...new Set(violations.map((v) => v.id))];
  writeFileAtomic(path, caseToFile(c, `fuzz counterexample: ${target.name} fails ${ids.join(", ")}; found from seed ${details.seed} (fast-check path ${details.counterexamplePath}), then minimised`));
  const builtin = await onBuiltinModels(c, target, violations);
  const lines = [
    `fuzz: ${target.name} fails ${ids.join(", ")} after ${details.numRuns} run(s), shrunk ${details.numShrinks} time(s) by fast-check ` +
      `and ${min.kept} more step(s) of ${min.tried} tried on the case`,
    `  seed ${details.seed}, path ${details.counterexamplePath}`,
    `  counterexample: ${describeCase(c)}`,
    ...violations.map((v) => `  ${v.id}: ${v.message.replace(/\n/g, "\n    ")}`),
    `  replay file: ${shownPath(path)}`,
    `  replay:      ${replayCommand(path)}`,
    `               npm run fuzz -- --replay ${shellQuote(shownPath(path))}`,
    `  search again: ${commandLine("npm run fuzz --", ["--subject", options.subjectSpec ?? target.name, "--seed", details.seed])}${options.runsFlag ?? ""}`,
    ...builtin.map((b, i) => `  ${i === 0 ? "on a built-in model:" : "                    "} ${b}`),
  ];
  return { fuzzCase: c, violations, path, builtin, message: lines.join("\n") };
}

/** The violations a failed predicate threw; an exception outside the checks becomes "exception". */
function violationsOf(error: unknown): Violation[] {
  if (error instanceof FuzzViolation && error.violations.length) return error.violations;
  return [{ id: "exception", message: error instanceof Error ? (error.stack ?? error.message) : String(error) }];
}

export interface FuzzParams {
  seed: number;
  numRuns: number;
  outDir?: string;
  targets?: readonly string[];
  onRun?: () => void;
  /** How the subject was named on the command line (a module path): case files and printed commands. */
  subjectSpec?: string;
}

/**
 * The self-test's bound: every known-bad subject must be caught within this many generated cases
 * (shrinking runs not counted) from the CI seed. Measured: at most 7 from the CI seed.
 */
export const SELF_TEST_RUNS = 100;

/**
 * fast-check parameters for a subject's property: fixed seed and runs, and a reporter that writes
 * the counterexample's replay file and throws the message (for @fast-check/vitest's test.prop).
 */
export function fuzzParameters(subject: Subject, p: FuzzParams): fc.Parameters<[FuzzCase]> {
  return {
    seed: p.seed,
    numRuns: p.numRuns,
    endOnFailure: false,
    asyncReporter: async (details) => {
      if (!details.failed) return;
      const x = await explainFailure(details, subject, { outDir: p.outDir, targets: p.targets, runsFlag: ` --runs ${p.numRuns}`, subjectSpec: p.subjectSpec });
      throw new Error(x.message);
    },
  };
}

export interface FuzzRun {
  details: fc.RunDetails<[FuzzCase]>;
  counterexample?: Counterexample;
  ms: number;
}

/** Runs a subject's property (fc.check) and explains a failure: for the CLI (a worker target) and the suites. */
export async function fuzzSubject(subject: Subject | FuzzTarget, p: FuzzParams, abandoned: () => boolean = () => false): Promise<FuzzRun> {
  const started = performance.now();
  const details = await fc.check(fuzzProperty(subject, { targets: p.targets, outDir: p.outDir, onRun: p.onRun, subjectSpec: p.subjectSpec }), {
    seed: p.seed,
    numRuns: p.numRuns,
  });
  const ms = performance.now() - started;
  // a search its target abandoned (a case's worker died) has no counterexample to explain or write
  if (!details.failed || abandoned()) return { details, ms };
  const counterexample = await explainFailure(details, subject, { outDir: p.outDir, targets: p.targets, runsFlag: ` --runs ${p.numRuns}`, subjectSpec: p.subjectSpec });
  return { details, counterexample, ms };
}

/** A fuzz run of `clip-parity fuzz`: the subject by name, the parameters as plain data. */
export interface FuzzRunInput {
  subject: string;
  params: Omit<FuzzParams, "onRun">;
}

/** What a fuzz run hands back: the run's figures and its counterexample, if any. */
export interface FuzzRunResult {
  numRuns: number;
  numShrinks: number;
  ms: number;
  counterexample?: Counterexample;
}

export const jobs = {
  /** One case in the subject's worker: its violations, judged as every cell is. */
  case: async (input: { fuzzCase: FuzzCase; repro: string }, tools: JobTools) =>
    (await runAnyCase(input.fuzzCase, await tools.subjectFor(input.fuzzCase.subject), { repro: input.repro })).violations,
} satisfies JobHandlers;

const CASE_JOB = jobKind("case", import.meta.url);

/** A case may take its clip's limit, its loading and the harness's work. */
const PER_CASE_DEADLINE_MS = 40_000;

/** A case whose worker died, hung or left work running: the search ends with it. */
class IsolationFault extends Error {}

/**
 * `clip-parity fuzz`: the search (fast-check, shrinking, the verdict) runs in this thread, each case in
 * a worker of the pool like every cell, so a subject that exits, hangs or exhausts its heap ends the
 * search with that fault, and no subject runs beside fast-check or the predicate (it could patch them).
 */
export async function fuzzIsolated(input: FuzzRunInput, options: { heapMb?: number } = {}): Promise<{ result?: FuzzRunResult; fault: string | null }> {
  const pool = new WorkerPool({ workers: 1, timeoutMs: 20_000, heapMb: options.heapMb });
  let fault: string | null = null;
  const submit = async (kind: { name: string; module: string }, jobInput: unknown): Promise<unknown> => {
    if (fault !== null) throw new IsolationFault(fault);
    const o = await pool.submit({ index: 0, kind: kind.name, module: kind.module, input: jobInput, deadlineMs: PER_CASE_DEADLINE_MS });
    if (o.fault !== null || o.result === undefined) throw new IsolationFault((fault = o.fault ?? "the worker handed back no result"));
    return o.result;
  };
  // the subject is loaded once, in the worker its cases then run in (its name and shape name the cases)
  const probed = await pool.submit({ index: 0, kind: "probe", module: null, input: input.subject, deadlineMs: PER_CASE_DEADLINE_MS });
  if (probed.fault !== null || probed.result === undefined) {
    await pool.close();
    return { fault: probed.fault ?? "the worker handed back no result" };
  }
  const info = probed.result as SubjectInfo;
  const target: FuzzTarget = {
    name: info.name,
    shape: info.shape as Subject["shape"],
    violations: async (c, repro) => (await submit(CASE_JOB, { fuzzCase: { ...c, subject: input.subject }, repro })) as Violation[],
    failedChecks: async (cell) => {
      const r = (await submit(CELL_JOB, { cell: { ...cell, subject: input.subject }, options: { backend: "cpu", timeoutMs: 20_000 } } satisfies CellJobInput)) as CellResult;
      return r.checks.filter((x) => x.status === "fail").map((x) => x.id);
    },
  };
  try {
    const r = await fuzzSubject(target, input.params, () => fault !== null);
    if (fault !== null) return { fault };
    return { result: { numRuns: r.details.numRuns, numShrinks: r.details.numShrinks, ms: r.ms, ...(r.counterexample ? { counterexample: r.counterexample } : {}) }, fault: null };
  } finally {
    await pool.close();
  }
}

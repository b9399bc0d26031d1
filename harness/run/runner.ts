/**
 * The library entry of every run: `runMatrix(matrix, options, hooks)`. The command line, `npm test`
 * and the nightly all come through here, so a matrix gives the same verdict whoever runs it.
 *
 * What to run is the Matrix (matrix/ builds them); how it runs is decided here once (policy.ts: the
 * backend, the subjects, the cells and the limits; an executor runs the cells); how it is reported
 * is the caller's, through optional hooks (reports/ registers reporters on them).
 */
import type { Subject } from "../subject/api.ts";
import { isExternalSpec, isSubjectPath, loadSubject } from "../registry/registry.ts";
import type { BackendKind } from "../backend/backend.ts";
import { cellId, type Budgets, type Cell, type Matrix } from "../cell/cell.ts";
import type { CellResult, RunSummary } from "../results/types.ts";
import { summarize } from "../results/summary.ts";
import { runCell } from "../execute/cell.ts";
import { goldenSession, type GoldenSession } from "./golden.ts";
import { JOB_DEADLINE_PHASES, DEFAULT_TIMEOUT_MS, probeSubjects, runJobs, type Job } from "../sandbox/pool.ts";
import { runJobsSupervised } from "../sandbox/supervisor.ts";
import { CELL_JOB, cellOutcome, estimateCellBytes, referenceKey, type CellJobInput } from "../execute/cell-job.ts";
import { resolveBackend, selectCells, subjectsOf, type RunLimits } from "./policy.ts";
import type { Shard } from "./shard.ts";
import { isolationCheck } from "../checks/isolation.ts";

export interface RunStartInfo {
  matrix: string;
  backend: BackendKind;
  total: number;
  /** The run's cells, in run order. */
  cells: readonly Cell[];
}

/** Every hook optional, as vitest's reporters: progress displays and reporters plug in here. */
export interface RunHooks {
  onRunStart?(info: RunStartInfo): void;
  onCellStart?(cell: Cell, index: number, total: number): void;
  /** `index`: the cell's place in the run (matrix order); `done`: cells finished so far (any order). */
  onCellEnd?(result: CellResult, index: number, total: number, done: number): void;
  onRunEnd?(run: RunOutput): void | Promise<void>;
}

export interface RunMatrixOptions {
  /** The backend asked for; undefined = the matrix's own (cuda matrices need CUDA). */
  backend?: BackendKind;
  subjects?: readonly string[];
  /** Cells whose id contains this text or matches this expression; `exclude` leaves out those matching it. */
  filter?: string | RegExp;
  exclude?: RegExp;
  shard?: Shard;
  seed?: number;
  limits?: Partial<RunLimits>;
  /** Wall-clock limit of one cell, in ms (default 60 s). */
  timeoutMs?: number;
  /** --golden: check | update | off; undefined = check under CI when the golden exists. */
  golden?: string;
  goldenDir?: string;
  /** Where the golden's verdict lines go (default stdout). */
  goldenOut?: NodeJS.WritableStream;
  /** Compute every cell's tensor hash (the golden does this itself). */
  hashTensors?: boolean;
  /** Write each cell's tensors here (one cell: this folder; several: a folder per cell index). */
  dumpDir?: string;
  /**
   * Worker threads (default: the cores); memory budget of the cells in flight (default: half the RAM).
   * 0 runs every cell inline, in order, in the calling thread: the same results without isolation
   * (a subject that blocks or exits takes the caller with it). Mutation testing needs it: Stryker's
   * instrumented modules live in the calling thread, which a worker (it loads the sources) never sees.
   */
  workers?: number;
  memoryBudgetBytes?: number;
  /** V8 heap of a worker in MiB (default 2048). */
  workerHeapMb?: number;
  /**
   * Run the pool in a child process under a supervisor (harness/sandbox/supervisor.ts; `clip-parity run`
   * does): a subject that ends the whole process (SIGKILL, a native crash) fails its own cell's
   * `isolation` check and the run goes on, where without it the caller's process ends with it.
   */
  supervise?: boolean;
  /** Live bytes one cell's backend may hold (a subject asking for more gets an error). */
  maxLiveBytes?: number;
  /** How the caller reruns a matrix, for messages: "clip-parity run --matrix cpu". */
  rerun?: string;
  /**
   * A search instead of a sweep: once it returns true for a finished cell, no further cell starts,
   * and the output holds only the cells that ran (`stopped` says so). The suite uses it to find the
   * first cell that catches a known-bad subject.
   */
  stopWhen?: (result: CellResult) => boolean;
  env?: NodeJS.ProcessEnv;
}

export interface RunOutput {
  matrix: string;
  backend: BackendKind;
  /** In run order (matrix order), whatever order the cells finished in. */
  results: CellResult[];
  /** True when stopWhen ended the run early: `results` then holds only the cells that ran. */
  stopped: boolean;
  summary: RunSummary;
  /** Lines for the reports (the golden's verdict). */
  notes: string[];
  /** The known-bad subjects of the run (by their spec) and the checks that must catch each. */
  catchBy: Record<string, string[]>;
}

export class SubjectCache {
  private readonly loaded = new Map<string, Promise<Subject>>();
  get(spec: string): Promise<Subject> {
    let s = this.loaded.get(spec);
    if (!s) this.loaded.set(spec, (s = loadSubject(spec)));
    return s;
  }
}

/** What a run needs once its input has been validated: nothing below can be bad input any more. */
export interface PreparedRun {
  matrix: Matrix;
  backend: BackendKind;
  cells: Cell[];
  budgets?: Budgets;
  golden: GoldenSession | null;
  subjects: SubjectCache;
  /** subject spec -> its declared catchBy, for the subjects that declare one. */
  catchBy: Record<string, string[]>;
}

/**
 * Validates everything a run depends on before any cell runs (exit 2 on bad input): the backend,
 * the selection, the golden, every subject (it loads).
 */
export async function prepareRun(matrix: Matrix, options: RunMatrixOptions = {}): Promise<PreparedRun> {
  const backend = resolveBackend(matrix, options.backend, options.rerun ?? `clip-parity run --matrix ${matrix.name}`);
  // A user module runs its top level when imported: only ever inside a worker, under a time limit. Its name is
  // read first: --filter may give a cell by the id the results show (the module's name, not its path).
  const userSpecs = subjectsOf(matrix, options.subjects).filter(isSubjectPath);
  const infos = await probeSubjects(userSpecs, options.timeoutMs ?? DEFAULT_TIMEOUT_MS, options.workerHeapMb);
  const names = Object.fromEntries(userSpecs.map((spec, i) => [spec, infos[i]!.name]));
  const cells = selectCells(matrix, { ...options, names });
  const partial = Boolean(options.shard || options.filter || options.exclude || options.subjects || options.seed !== undefined);
  const golden = goldenSession({ mode: options.golden, matrix: matrix.name, backend, partial, dir: options.goldenDir, env: options.env, out: options.goldenOut });
  const specs = [...new Set(cells.map((c) => c.subject))];
  const catchBy: Record<string, string[]> = {};
  userSpecs.forEach((spec, i) => {
    if (specs.includes(spec) && infos[i]?.catchBy) catchBy[spec] = [...infos[i]!.catchBy!];
  });
  const subjects = new SubjectCache();
  for (const s of specs) {
    if (isSubjectPath(s)) continue;
    const subject = await subjects.get(s);
    if (subject.catchBy) catchBy[s] = [...subject.catchBy];
  }
  return { matrix, backend, cells, budgets: matrix.budgets, golden, subjects, catchBy };
}

export { DEFAULT_TIMEOUT_MS } from "../sandbox/pool.ts";

/** Runs a prepared run's cells and finishes it (golden verdict, summary, hooks). */
export async function executeRun(run: PreparedRun, options: RunMatrixOptions = {}, hooks: RunHooks = {}): Promise<RunOutput> {
  const { cells, backend } = run;
  const total = cells.length;
  hooks.onRunStart?.({ matrix: run.matrix.name, backend, total, cells });
  const slots: (CellResult | undefined)[] = new Array(total);
  let done = 0;
  let stopped = false;
  const inputs: CellJobInput[] = cells.map((cell, index) => ({
    cell,
    options: {
      backend,
      timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      budgets: run.budgets,
      hashTensors: options.hashTensors || run.golden !== null,
      dumpDir: options.dumpDir === undefined ? undefined : total === 1 ? options.dumpDir : `${options.dumpDir}/${index}`,
      maxLiveBytes: options.maxLiveBytes,
    },
  }));
  const ended = (index: number, result: CellResult) => {
    slots[index] = result;
    hooks.onCellEnd?.(result, index, total, ++done);
    if (options.stopWhen?.(result)) stopped = true;
  };
  // Subjects that run outside this process (torchrun) share one adapter session: in order, here.
  // With workers: 0 every cell runs here.
  const inProcess = options.workers === 0;
  const indices = inputs.map((_, i) => i);
  // each external subject runs in a session of its own: its cells together, subjects in the order they first appear
  const subjectOrder = new Map<string, number>();
  for (const i of indices) if (!subjectOrder.has(inputs[i]!.cell.subject)) subjectOrder.set(inputs[i]!.cell.subject, i);
  const inline = indices
    .filter((i) => inProcess || isExternalSpec(inputs[i]!.cell.subject))
    .sort((a, b) => subjectOrder.get(inputs[a]!.cell.subject)! - subjectOrder.get(inputs[b]!.cell.subject)! || a - b);
  const pooled = indices.filter((i) => !inProcess && !isExternalSpec(inputs[i]!.cell.subject));
  // cells of one reference next to each other, the first of each group in matrix order (worker caches)
  const firstAt = new Map<string, number>();
  for (const i of pooled) if (!firstAt.has(referenceKey(cells[i]!))) firstAt.set(referenceKey(cells[i]!), i);
  pooled.sort((a, b) => firstAt.get(referenceKey(cells[a]!))! - firstAt.get(referenceKey(cells[b]!))! || a - b);
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const jobs: Job[] = pooled.map((i) => ({
    index: i,
    kind: CELL_JOB.name,
    module: CELL_JOB.module,
    input: inputs[i],
    bytes: estimateCellBytes(cells[i]!),
    affinity: referenceKey(cells[i]!),
    deadlineMs: timeoutMs * JOB_DEADLINE_PHASES,
    label: `subject ${cells[i]!.subject} on cell ${cellId(cells[i]!)}`,
  }));
  await Promise.all([
    (options.supervise ? runJobsSupervised : runJobs)(jobs, {
      workers: options.workers,
      timeoutMs,
      memoryBudgetBytes: options.memoryBudgetBytes,
      heapMb: options.workerHeapMb,
      onStart: (job) => hooks.onCellStart?.(cells[job.index]!, job.index, total),
      onOutcome: (job, o) => ended(job.index, cellOutcome(inputs[job.index]!, o)),
      stop: () => stopped,
    }),
    (async () => {
      for (const i of inline) {
        if (stopped) break;
        const input = inputs[i]!;
        hooks.onCellStart?.(input.cell, i, total);
        const result = await runCell(input.cell, { ...input.options, subject: await run.subjects.get(input.cell.subject) });
        // as a worker reports it: the subject ran to its end here (nothing to isolate it from)
        if (inProcess && !isExternalSpec(input.cell.subject)) result.checks.push(isolationCheck(null));
        ended(i, result);
      }
    })(),
  ]);
  const results = slots.filter((r): r is CellResult => r !== undefined);
  const finished = run.golden ? run.golden.finish(results) : { summary: summarize(results), notes: [] };
  const output: RunOutput = { matrix: run.matrix.name, backend, results, stopped, summary: finished.summary, notes: finished.notes, catchBy: run.catchBy };
  await hooks.onRunEnd?.(output);
  return output;
}

/** prepareRun, then executeRun. */
export async function runMatrix(matrix: Matrix, options: RunMatrixOptions = {}, hooks: RunHooks = {}): Promise<RunOutput> {
  return executeRun(await prepareRun(matrix, options), options, hooks);
}

/** Hooks that call each of `list` in turn (undefined entries skipped). */
export function combineHooks(...list: (RunHooks | undefined | null)[]): RunHooks {
  const all = list.filter((x): x is RunHooks => Boolean(x));
  return {
    onRunStart: (info) => all.forEach((h) => h.onRunStart?.(info)),
    onCellStart: (cell, index, total) => all.forEach((h) => h.onCellStart?.(cell, index, total)),
    onCellEnd: (result, index, total, done) => all.forEach((h) => h.onCellEnd?.(result, index, total, done)),
    onRunEnd: async (run) => {
      for (const h of all) await h.onRunEnd?.(run);
    },
  };
}

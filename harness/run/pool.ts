/**
 * Worker threads that run cells (worker.ts): the subjects' code runs where the harness can stop it,
 * and the matrix uses every core.
 *
 * - Isolation: each subject phase (loading its module, its clip) runs under a wall-clock limit that
 *   this thread enforces from outside, by terminating the worker: a loop that never yields cannot
 *   stop it. A worker that dies (process.exit, an uncaught error, out of heap) fails the cell it ran
 *   with a failing `isolation` check that says how, and is replaced; the rest of the run goes on.
 * - Parallelism with a memory budget: a cell starts only while the estimated bytes of the cells in
 *   flight stay under the budget (one cell always runs, whatever its size). Results keep their index,
 *   so reports come out in matrix order whatever order the cells finish in.
 * - Locality: cells that share a reference (model, dtype, norm, regime, seed, step) go to the worker
 *   that computed it, whose cache then answers for them.
 */
import { availableParallelism, totalmem } from "node:os";
import { Worker } from "node:worker_threads";
import { CHECK_IDS } from "../checks/index.ts";
import { ClipParityError, InputError } from "../errors.ts";
import { DTYPE_BYTES, type BackendKind } from "../backend/backend.ts";
import { getModel } from "../model/models.ts";
import { cellId, reproCommand, type Budgets, type Cell } from "../spec/cell.ts";
import type { CellResult } from "../results/types.ts";

/** What a worker needs to run one cell: plain data only (it crosses a thread). */
export interface CellJob {
  index: number;
  cell: Cell;
  options: {
    backend: BackendKind;
    timeoutMs?: number;
    budgets?: Budgets;
    hashTensors?: boolean;
    dumpDir?: string;
    maxLiveBytes?: number;
  };
}

export type WorkerMessage =
  | { type: "ready" }
  | { type: "subject"; index: number; running: boolean }
  | { type: "result"; index: number; result: CellResult; recycle?: boolean }
  | { type: "crash"; index: number | null; what: string }
  | { type: "probed"; spec: string; error: { message: string; code: string | null; exitCode: number | null } | null };

export interface PoolOptions {
  /** Worker threads (default: the cores, at most the cells). */
  workers?: number;
  /** Wall-clock limit of a subject's phase in ms, before the grace below (default 60 s). */
  timeoutMs?: number;
  /** Extra time past timeoutMs before the worker is terminated: the world's own limit fires first. */
  graceMs?: number;
  /** Bytes the cells in flight may hold together (default: half the machine's memory). */
  memoryBudgetBytes?: number;
  /** V8 heap limit of a worker in MiB (its tensors live in native memory, outside it). */
  heapMb?: number;
}

export const DEFAULT_GRACE_MS = 2_000;

/** What a cell may hold at its peak: every rank's gradients (replicated over dp_replicate), with slack. */
export function estimateCellBytes(cell: Cell): number {
  let params = 0;
  try {
    params = getModel(cell.model).totalParams;
  } catch {
    return 64 * 1024 * 1024; // a model the worker will refuse: it holds nothing
  }
  const copies = cell.layout.dp_replicate * Math.max(1, Math.min(cell.layout.tp, 2));
  return params * DTYPE_BYTES[cell.dtype] * copies * 1.25 + 32 * 1024 * 1024;
}

/** The key of a cell's reference: cells with the same key share one computation. */
export function referenceKey(c: Cell): string {
  return [c.model, c.dtype, c.normType, c.regime, c.seed, c.step ?? 0].join("|");
}

/** A failing result for a cell whose worker did not hand one back. */
export function isolationFailure(job: CellJob, what: string, ms: number): CellResult {
  const c = job.cell;
  return {
    id: cellId(c),
    cell: c,
    backend: job.options.backend,
    subjectName: c.subject,
    maxNorm: c.maxNorm ?? NaN,
    errorIfNonfinite: c.errorIfNonfinite ?? false,
    totalNorm: null,
    referenceNorm: NaN,
    clipCoef: NaN,
    checks: [
      ...CHECK_IDS.map((id) => ({ id, status: "skip" as const, message: "the cell did not finish: see isolation" })),
      { id: "isolation", status: "fail" as const, message: `${what}\n  reproduce: ${reproCommand(c, job.options.backend)}` },
    ],
    ranks: [],
    memory: [],
    comm: [],
    liveness: null,
    repro: reproCommand(c, job.options.backend),
    durationMs: ms,
  };
}

interface Lane {
  worker: Worker;
  job: CellJob | null;
  started: number;
  timer: NodeJS.Timeout | null;
  /** Reference keys this worker has computed (its cache holds them). */
  keys: Set<string>;
  /** How the worker ended, when it did: the message of its crash report. */
  crashed: string | null;
  done: boolean;
  /** It said "ready": a worker that dies before that is the harness's failure, not a subject's. */
  ready: boolean;
}

/** Workers that die before they are ready, in a row, before the run gives up (a broken installation). */
const MAX_START_FAILURES = 3;

const ENTRY = new URL("./worker-entry.mjs", import.meta.url);

export class WorkerPool {
  private readonly lanes: Lane[] = [];
  private readonly size: number;
  private readonly timeoutMs: number;
  private readonly graceMs: number;
  private readonly budget: number;
  private readonly heapMb: number;

  constructor(cells: number, options: PoolOptions = {}) {
    this.size = Math.max(1, Math.min(options.workers ?? availableParallelism(), cells));
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
    this.budget = options.memoryBudgetBytes ?? totalmem() / 2;
    this.heapMb = options.heapMb ?? 2048;
  }

  /**
   * Runs every job, calling onResult as each ends (any order); stops starting new ones once
   * shouldStop() is true. Resolves when every started job has ended and every worker has exited.
   */
  async run(
    jobs: readonly CellJob[],
    onResult: (index: number, result: CellResult) => void,
    shouldStop: () => boolean = () => false,
    onStart?: (job: CellJob) => void,
  ): Promise<void> {
    // Cells of one reference next to each other, the first of each group in matrix order.
    const firstAt = new Map<string, number>();
    for (const j of jobs) if (!firstAt.has(referenceKey(j.cell))) firstAt.set(referenceKey(j.cell), j.index);
    const queue = [...jobs].sort((a, b) => firstAt.get(referenceKey(a.cell))! - firstAt.get(referenceKey(b.cell))! || a.index - b.index);
    const bytes = new Map(jobs.map((j) => [j.index, estimateCellBytes(j.cell)]));
    let inFlightBytes = 0;
    let startFailures = 0;
    let settle!: () => void;
    let abort!: (err: Error) => void;
    const finished = new Promise<void>((resolve, reject) => {
      settle = resolve;
      abort = reject;
    });

    const pick = (lane: Lane): number => {
      // the first queued cell whose reference this worker holds, else the first one nobody holds
      let fallback = -1;
      for (let i = 0; i < queue.length; i++) {
        const key = referenceKey(queue[i]!.cell);
        if (lane.keys.has(key)) return i;
        if (fallback < 0 && !this.lanes.some((l) => l !== lane && l.keys.has(key))) fallback = i;
      }
      return fallback >= 0 ? fallback : 0;
    };

    const dispatch = () => {
      if (shouldStop()) queue.length = 0;
      for (const lane of this.lanes) {
        if (lane.job || lane.done || queue.length === 0) continue;
        const i = pick(lane);
        const need = bytes.get(queue[i]!.index)!;
        const running = this.lanes.some((l) => l.job);
        if (running && inFlightBytes + need > this.budget) continue;
        const [job] = queue.splice(i, 1);
        lane.job = job!;
        lane.keys.add(referenceKey(job!.cell));
        inFlightBytes += need;
        lane.started = performance.now();
        onStart?.(job!);
        lane.worker.postMessage({ type: "run", job });
      }
      if (queue.length === 0 && this.lanes.every((l) => !l.job)) {
        for (const l of this.lanes) l.done = true;
        void Promise.all(this.lanes.map((l) => l.worker.terminate())).then(() => settle());
      }
    };

    const finish = (lane: Lane, result: CellResult) => {
      const job = lane.job!;
      if (lane.timer) clearTimeout(lane.timer);
      lane.timer = null;
      lane.job = null;
      inFlightBytes -= bytes.get(job.index)!;
      onResult(job.index, result);
    };

    const spawn = (): Lane => {
      const worker = new Worker(ENTRY, { resourceLimits: { maxOldGenerationSizeMb: this.heapMb }, stdout: false, stderr: false });
      const lane: Lane = { worker, job: null, started: 0, timer: null, keys: new Set(), crashed: null, done: false, ready: false };
      const replace = (what: string) => {
        if (lane.done) return;
        lane.done = true;
        if (!lane.ready && ++startFailures >= MAX_START_FAILURES) {
          for (const l of this.lanes) l.done = true;
          void Promise.all(this.lanes.map((l) => l.worker.terminate()));
          abort(new Error(`internal: ${MAX_START_FAILURES} cell workers in a row died before they were ready: ${what}`));
          return;
        }
        const job = lane.job;
        if (job) finish(lane, isolationFailure(job, what, performance.now() - lane.started));
        void worker.terminate();
        this.lanes[this.lanes.indexOf(lane)] = spawn();
        dispatch();
      };
      worker.on("message", (m: WorkerMessage) => {
        if (m.type === "ready") {
          lane.ready = true;
          startFailures = 0;
          dispatch();
        }
        else if (m.type === "subject") {
          if (lane.timer) clearTimeout(lane.timer);
          lane.timer = m.running
            ? setTimeout(
                () => replace(`the subject did not yield for ${((this.timeoutMs + this.graceMs) / 1000).toFixed(0)} s (a loop that never awaits?): its worker was terminated`),
                this.timeoutMs + this.graceMs,
              )
            : null;
        } else if (m.type === "result") {
          finish(lane, m.result);
          if (m.recycle) replace("");
          else dispatch();
        } else if (m.type === "crash") {
          lane.crashed = m.what;
          replace(m.what);
        }
      });
      worker.on("error", (err: Error & { code?: string }) => {
        const what =
          err.code === "ERR_WORKER_OUT_OF_MEMORY"
            ? `the subject's thread ran out of memory (heap limit ${this.heapMb} MiB): its worker was terminated`
            : `the subject's worker failed: ${err.name}: ${err.message}`;
        replace(lane.crashed ?? what);
      });
      worker.on("exit", (code) => {
        if (!lane.done) replace(lane.crashed ?? `the subject's worker exited with code ${code} while it ran`);
      });
      return lane;
    };

    if (queue.length === 0) return;
    for (let i = 0; i < this.size; i++) this.lanes.push(spawn());
    await finished;
  }
}

/**
 * Loads user subject modules in a worker before any cell runs, so that bad input is exit 2 up front and
 * a module whose top level never returns (or exits, or throws later) cannot hang or end the harness.
 */
export async function probeSubjects(specs: readonly string[], timeoutMs: number): Promise<void> {
  if (specs.length === 0) return;
  const worker = new Worker(ENTRY, { resourceLimits: { maxOldGenerationSizeMb: 2048 } });
  try {
    await new Promise<void>((resolve, reject) => {
      let i = -1;
      let timer: NodeJS.Timeout | undefined;
      let crashed: string | null = null;
      const next = () => {
        if (timer) clearTimeout(timer);
        if (++i === specs.length) return resolve();
        timer = setTimeout(
          () => reject(new InputError(`subject module ${specs[i]} did not finish loading within ${(timeoutMs / 1000).toFixed(0)} s (a loop at its top level?)`)),
          timeoutMs,
        );
        worker.postMessage({ type: "probe", spec: specs[i] });
      };
      worker.on("message", (m: WorkerMessage) => {
        if (m.type === "ready") next();
        else if (m.type === "crash") crashed = m.what;
        else if (m.type === "probed") {
          if (m.error) {
            if (timer) clearTimeout(timer);
            reject(new ClipParityError(m.error.code ?? "E_INPUT", m.error.message, m.error.exitCode ?? 2));
          } else next();
        }
      });
      const died = (why: string) => {
        if (timer) clearTimeout(timer);
        reject(new InputError(`subject module ${specs[Math.max(i, 0)]} could not be loaded: ${crashed ?? why}`));
      };
      worker.on("error", (err) => died(`${err.name}: ${err.message}`));
      worker.on("exit", (code) => died(`its thread exited with code ${code}`));
    });
  } finally {
    worker.removeAllListeners("exit");
    await worker.terminate();
  }
}

/**
 * Worker threads that run subject code for every command (worker.ts): cells of `run` and `cell`, the
 * meta cells of `plan`, `train` and `resume` cases, fuzz runs and fuzz case replays. The subject's code
 * runs where the harness can stop it, and nothing it does can reach the verdict:
 *
 * - The harness speaks to a worker over a MessagePort created here and handed to the worker before any
 *   subject code loads (worker.ts keeps it private and seals its realm: seal.ts). Messages on the
 *   worker's public port are ignored: a subject that posts a result, a second result or "the subject
 *   stopped running" decides nothing. Exactly one result per job is accepted.
 * - Wall clock: each subject phase (loading its module, its clip) runs under a limit enforced from this
 *   thread by terminating the worker, so a loop that never yields cannot stop it; every job also has a
 *   deadline from the moment it starts that no message can cancel.
 * - A worker that dies (process.exit, an uncaught error, out of heap) fails the job it ran with an
 *   `isolation` fault that says how, and is replaced; the rest of the run goes on.
 * - Parallelism with a memory budget: a job starts only while the estimated bytes of the jobs in flight
 *   stay under the budget (one job always runs, whatever its size).
 * - Locality: jobs with the same affinity (cells that share a reference) go to the worker that ran the
 *   first of them, whose cache then answers.
 */
import { availableParallelism, totalmem } from "node:os";
import { MessageChannel, Worker, type MessagePort } from "node:worker_threads";
import { ClipParityError, InputError } from "../errors.ts";

/**
 * One piece of work for a worker: plain data only (it crosses a thread). Its kind is registered by the
 * folder that owns it (execute/job.ts): the worker imports `module` and runs the handler named `kind`
 * there, so the sandbox imports no job's code. The sandbox's own kind, "probe", has no module.
 */
export interface Job {
  index: number;
  kind: string;
  /** The URL of the harness module whose `jobs` has the handler; null for "probe". */
  module: string | null;
  input: unknown;
  /** Estimated bytes it holds at its peak (memory budget); default 64 MiB. */
  bytes?: number;
  /** Jobs with the same affinity prefer the worker that ran one of them (its caches). */
  affinity?: string;
  /** Wall-clock limit of the whole job from its start, in ms, that nothing in the worker can cancel. */
  deadlineMs?: number;
  /** How a fault names the job, e.g. "subject S on cell ID" (supervisor.ts); default "job <index>". */
  label?: string;
}

/** How a job ended: its result, or the fault that kept it from one; a fault may come with a result. */
export interface JobOutcome<R = unknown> {
  result?: R;
  /** Why the subject's code did not run to a clean end (it becomes the `isolation` check), or null. */
  fault: string | null;
  ms: number;
}

/** Messages on the private port. */
export type WorkerMessage =
  | { type: "ready" }
  | { type: "subject"; index: number; running: boolean }
  | { type: "result"; index: number; result: unknown; left: string[] }
  | { type: "failed"; index: number; error: { message: string; code: string | null; exitCode: number | null } }
  | { type: "crash"; index: number | null; what: string };

export interface PoolOptions {
  /** Worker threads (default: the cores). */
  workers?: number;
  /** Wall-clock limit of a subject's phase in ms, before the grace below (default 60 s). */
  timeoutMs?: number;
  /** Extra time past timeoutMs before the worker is terminated: the world's own limit fires first. */
  graceMs?: number;
  /** Bytes the jobs in flight may hold together (default: half the machine's memory). */
  memoryBudgetBytes?: number;
  /** V8 heap limit of a worker in MiB (its tensors live in native memory, outside it). */
  heapMb?: number;
}

export const DEFAULT_GRACE_MS = 2_000;
export const DEFAULT_TIMEOUT_MS = 60_000;
export const DEFAULT_HEAP_MB = 2048;
/** A job's deadline from its start, in subject-phase limits: loading, the clip, and the harness's own work. */
export const JOB_DEADLINE_PHASES = 4;

interface Pending {
  job: Job;
  resolve(o: JobOutcome): void;
  reject(err: Error): void;
  onStart?: () => void;
}

interface Lane {
  worker: Worker;
  port: MessagePort;
  task: Pending | null;
  started: number;
  phaseTimer: NodeJS.Timeout | null;
  deadlineTimer: NodeJS.Timeout | null;
  affinity: Set<string>;
  /** How the worker ended, when it said so before dying. */
  crashed: string | null;
  done: boolean;
  /** It said "ready": a worker that dies before that is the harness's failure, not a subject's. */
  ready: boolean;
}

/** Workers that die before they are ready, in a row, before the pool gives up (a broken installation). */
const MAX_START_FAILURES = 3;

const ENTRY = new URL("./worker-entry.mjs", import.meta.url);

export class WorkerPool {
  private readonly lanes: Lane[] = [];
  private readonly queue: Pending[] = [];
  private readonly size: number;
  private readonly timeoutMs: number;
  private readonly graceMs: number;
  private readonly budget: number;
  private readonly heapMb: number;
  private inFlightBytes = 0;
  private startFailures = 0;
  private closed = false;
  private broken: Error | null = null;

  constructor(options: PoolOptions = {}) {
    this.size = Math.max(1, options.workers ?? availableParallelism());
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
    this.budget = options.memoryBudgetBytes ?? totalmem() / 2;
    this.heapMb = options.heapMb ?? DEFAULT_HEAP_MB;
  }

  /** Runs one job on the first free worker; resolves with its outcome (never with a subject's error). */
  submit(job: Job, onStart?: () => void): Promise<JobOutcome> {
    if (this.closed) return Promise.reject(new Error("internal: job submitted to a closed worker pool"));
    if (this.broken) return Promise.reject(this.broken);
    return new Promise((resolve, reject) => {
      this.queue.push({ job, resolve, reject, onStart });
      this.dispatch();
    });
  }

  /** Drops the jobs that have not started: they resolve with no result and no fault. */
  dropQueued(): void {
    for (const p of this.queue.splice(0)) p.resolve({ fault: null, ms: 0 });
  }

  /** Ends every worker; jobs still queued are dropped. */
  async close(): Promise<void> {
    this.closed = true;
    this.dropQueued();
    const lanes = this.lanes.splice(0);
    for (const l of lanes) {
      l.done = true;
      this.clearTimers(l);
    }
    await Promise.all(lanes.map((l) => l.worker.terminate()));
  }

  private clearTimers(lane: Lane): void {
    if (lane.phaseTimer) clearTimeout(lane.phaseTimer);
    if (lane.deadlineTimer) clearTimeout(lane.deadlineTimer);
    lane.phaseTimer = lane.deadlineTimer = null;
  }

  /** The first queued job this lane's caches favour, else the first nobody else favours, else the first. */
  private pick(lane: Lane): number {
    let fallback = -1;
    for (let i = 0; i < this.queue.length; i++) {
      const key = this.queue[i]!.job.affinity;
      if (key === undefined) return fallback >= 0 ? fallback : i;
      if (lane.affinity.has(key)) return i;
      if (fallback < 0 && !this.lanes.some((l) => l !== lane && l.affinity.has(key))) fallback = i;
    }
    return fallback >= 0 ? fallback : 0;
  }

  private dispatch(): void {
    if (this.closed || this.broken) return;
    while (this.lanes.length < this.size && this.lanes.filter((l) => !l.task).length < this.queue.length) this.lanes.push(this.spawn());
    for (const lane of this.lanes) {
      if (lane.task || lane.done || !lane.ready || this.queue.length === 0) continue;
      const i = this.pick(lane);
      const need = this.queue[i]!.job.bytes ?? 64 * 1024 * 1024;
      if (this.lanes.some((l) => l.task) && this.inFlightBytes + need > this.budget) continue;
      const [task] = this.queue.splice(i, 1);
      this.start(lane, task!, need);
    }
  }

  private start(lane: Lane, task: Pending, bytes: number): void {
    const { job } = task;
    lane.task = task;
    if (job.affinity !== undefined) lane.affinity.add(job.affinity);
    this.inFlightBytes += bytes;
    lane.started = performance.now();
    const deadline = job.deadlineMs ?? this.timeoutMs * JOB_DEADLINE_PHASES;
    lane.deadlineTimer = setTimeout(
      () => this.replace(lane, `the job did not finish within its deadline of ${(deadline / 1000).toFixed(0)} s: its worker was terminated`),
      deadline + this.graceMs,
    );
    task.onStart?.();
    lane.port.postMessage({ type: "run", job });
  }

  private finish(lane: Lane, outcome: JobOutcome): void {
    const task = lane.task!;
    this.clearTimers(lane);
    lane.task = null;
    this.inFlightBytes -= task.job.bytes ?? 64 * 1024 * 1024;
    task.resolve(outcome);
  }

  private fail(err: Error): void {
    this.broken = err;
    for (const l of this.lanes) {
      l.done = true;
      this.clearTimers(l);
      void l.worker.terminate();
      l.task?.reject(err);
    }
    for (const p of this.queue.splice(0)) p.reject(err);
  }

  /** Ends a lane's worker: its job (if any) ends with `what` as its fault, and a new worker takes its place. */
  private replace(lane: Lane, what: string): void {
    if (lane.done) return;
    lane.done = true;
    if (!lane.ready && ++this.startFailures >= MAX_START_FAILURES) {
      this.fail(new Error(`internal: ${MAX_START_FAILURES} workers in a row died before they were ready: ${what}`));
      return;
    }
    if (lane.task) this.finish(lane, { fault: what, ms: performance.now() - lane.started });
    this.clearTimers(lane);
    void lane.worker.terminate();
    const at = this.lanes.indexOf(lane);
    if (at >= 0) this.lanes.splice(at, 1);
    this.dispatch();
  }

  private spawn(): Lane {
    const { port1, port2 } = new MessageChannel();
    const worker = new Worker(ENTRY, {
      resourceLimits: { maxOldGenerationSizeMb: this.heapMb },
      stdout: false,
      stderr: false,
      workerData: { port: port2 },
      transferList: [port2],
    });
    const lane: Lane = { worker, port: port1, task: null, started: 0, phaseTimer: null, deadlineTimer: null, affinity: new Set(), crashed: null, done: false, ready: false };
    // the only channel the pool listens on; the worker's public port (worker.on("message")) is not heard
    port1.on("message", (m: WorkerMessage) => this.onMessage(lane, m));
    worker.on("error", (err: Error & { code?: string }) => {
      const what =
        err.code === "ERR_WORKER_OUT_OF_MEMORY"
          ? `the subject's thread ran out of memory (heap limit ${this.heapMb} MiB): its worker was terminated`
          : `the subject's worker failed: ${err.name}: ${err.message}`;
      this.replace(lane, lane.crashed ?? what);
    });
    worker.on("exit", (code) => {
      port1.close();
      if (!lane.done) this.replace(lane, lane.crashed ?? `the subject's worker exited with code ${code} while it ran`);
    });
    return lane;
  }

  private onMessage(lane: Lane, m: WorkerMessage): void {
    if (lane.done) return;
    const current = lane.task?.job.index;
    switch (m.type) {
      case "ready":
        lane.ready = true;
        this.startFailures = 0;
        this.dispatch();
        return;
      case "subject":
        if (m.index !== current) return;
        if (lane.phaseTimer) clearTimeout(lane.phaseTimer);
        lane.phaseTimer = m.running
          ? setTimeout(
              () => this.replace(lane, `the subject did not yield for ${((this.timeoutMs + this.graceMs) / 1000).toFixed(0)} s (a loop that never awaits?): its worker was terminated`),
              this.timeoutMs + this.graceMs,
            )
          : null;
        return;
      case "result": {
        if (m.index !== current) return; // one result per job: a second (or a stray) one is not heard
        const left = m.left.length ? `the subject left ${m.left.join(", ")} running after its clip returned (they would fire into a later cell); its worker was replaced` : null;
        this.finish(lane, { result: m.result, fault: left, ms: performance.now() - lane.started });
        if (left) this.replace(lane, left);
        else this.dispatch();
        return;
      }
      case "failed":
        if (m.index !== current) return;
        // bad input found inside the job (a subject module that cannot load): the caller's error to raise
        {
          const task = lane.task!;
          this.clearTimers(lane);
          lane.task = null;
          this.inFlightBytes -= task.job.bytes ?? 64 * 1024 * 1024;
          task.reject(new ClipParityError(m.error.code ?? "E_INPUT", m.error.message, m.error.exitCode ?? 2));
          this.dispatch();
        }
        return;
      case "crash":
        lane.crashed = m.what;
        this.replace(lane, m.what);
        return;
    }
  }
}

/** Runs `jobs` on a pool of its own and closes it; outcomes in job order. Stops starting jobs once `stop()` is true. */
export async function runJobs(
  jobs: readonly Job[],
  options: PoolOptions & { onStart?: (job: Job) => void; onOutcome?: (job: Job, o: JobOutcome) => void; stop?: () => boolean } = {},
): Promise<(JobOutcome | undefined)[]> {
  if (jobs.length === 0) return [];
  const pool = new WorkerPool({ ...options, workers: Math.min(options.workers ?? availableParallelism(), jobs.length) });
  const out: (JobOutcome | undefined)[] = new Array(jobs.length);
  try {
    await Promise.all(
      jobs.map((job, i) =>
        pool.submit(job, () => options.onStart?.(job)).then((o) => {
          if (o.result === undefined && o.fault === null) return; // dropped before it started
          out[i] = o;
          options.onOutcome?.(job, o);
          if (options.stop?.()) pool.dropQueued();
        }),
      ),
    );
  } finally {
    await pool.close();
  }
  return out;
}

/** Runs one job on a worker of its own: what the single-case commands (train, resume, replay) use. */
export async function runOneJob(job: Job, options: PoolOptions = {}): Promise<JobOutcome> {
  const [o] = await runJobs([job], { ...options, workers: 1 });
  return o!;
}

/**
 * Loads user subject modules in a worker before anything runs, so that bad input is exit 2 up front and
 * a module whose top level never returns (or exits, or throws later) cannot hang or end the harness.
 */
export async function probeSubjects(specs: readonly string[], timeoutMs: number, heapMb?: number): Promise<SubjectInfo[]> {
  const infos: SubjectInfo[] = [];
  if (specs.length === 0) return infos;
  const pool = new WorkerPool({ workers: 1, timeoutMs, graceMs: 0, heapMb });
  try {
    for (const spec of specs) {
      const o = await pool.submit({ index: 0, kind: "probe", module: null, input: spec, deadlineMs: timeoutMs });
      if (o.fault !== null) {
        const why = /did not yield|deadline/.test(o.fault) ? `did not finish loading within ${(timeoutMs / 1000).toFixed(0)} s (a loop at its top level?)` : `could not be loaded: ${o.fault}`;
        throw new InputError(`subject module ${spec} ${why}`);
      }
      infos.push(o.result as SubjectInfo);
    }
  } finally {
    await pool.close();
  }
  return infos;
}

/** What the harness reads of a subject without running its code in its own thread. */
export interface SubjectInfo {
  name: string;
  tolerance?: string;
  catchBy?: readonly string[];
  shape?: string;
}

/**
 * The pool in a child process, under a supervisor (issue 55). A worker thread keeps a subject from ending
 * the harness by process.exit(), a throw or a loop (pool.ts), but not from ending the whole process:
 * process.kill(process.pid, "SIGKILL"), a native crash (SIGSEGV), an abort. `runJobsSupervised` runs the
 * same jobs as `runJobs`, through the same pool, in a child process (supervisor-entry.mjs) that streams
 * each job's start and outcome back over the IPC channel, so the caller sees the same outcomes in the same
 * order of hooks. When the child dies:
 *
 * - the outcomes received so far are kept;
 * - the jobs that were in flight are run again, one at a time, in a fresh child: one that ends its child
 *   again (alone, so it is the one) gets that as its fault, which names the job (its `label`) and the
 *   signal or exit code; one that finishes there keeps its outcome (it was only beside the culprit);
 * - then the jobs not yet run go on in a fresh child with the run's parallelism.
 *
 * No child outlives the supervisor: a child ends itself when its IPC channel closes (the supervisor gone,
 * even by SIGKILL), and the supervisor kills its child when it exits or is ended by SIGINT or SIGTERM.
 *
 * Protocol (advanced serialization, the structured clone the worker's port uses too, so results arrive as
 * they would from the pool): in: { type: "run", jobs, options }, then maybe { type: "stop" }; out: "start"
 * and "outcome" (by the job's place in `jobs`), then "done" or "error".
 */
import { fork, type ChildProcess } from "node:child_process";
import { ClipParityError } from "../errors.ts";
import { onExitOrSignal } from "../util/exit.ts";
import { runJobs, type Job, type JobOutcome, type PoolOptions } from "./pool.ts";

type PoolSettings = Pick<PoolOptions, "workers" | "timeoutMs" | "graceMs" | "memoryBudgetBytes" | "heapMb">;

export type ToChild = { type: "run"; jobs: readonly Job[]; options: PoolSettings } | { type: "stop" };
export type FromChild =
  | { type: "start"; at: number }
  | { type: "outcome"; at: number; outcome: JobOutcome }
  | { type: "done" }
  | { type: "error"; error: { message: string; code: string | null; exitCode: number | null } };

export interface SupervisedOptions extends PoolSettings {
  onStart?: (job: Job) => void;
  onOutcome?: (job: Job, o: JobOutcome) => void;
  stop?: () => boolean;
}

const ENTRY = new URL("./supervisor-entry.mjs", import.meta.url);

/** The children alive now: killed if the supervisor exits or is ended by SIGINT/SIGTERM. */
const children = new Set<ChildProcess>();
function killChildren(): void {
  for (const c of children) c.kill("SIGKILL");
}

/** How a child ended without saying "done": "SIGKILL", "exit code 3". */
type Death = string;

/**
 * Runs `jobs` in one child process; resolves with the death (signal or exit code) when the child ended
 * before it said "done", or null. `started` gets each job's place (and when it started) as the child
 * reports it, `finished` each place whose outcome came.
 */
function runInChild(jobs: readonly Job[], settings: PoolSettings, options: SupervisedOptions, started: Map<number, number>, finished: Set<number>): Promise<Death | null> {
  return new Promise((resolve, reject) => {
    onExitOrSignal(killChildren);
    const child = fork(ENTRY, [], { serialization: "advanced", stdio: ["inherit", "inherit", "inherit", "ipc"] });
    children.add(child);
    // a child that died meanwhile cannot be told anything: its "close" says how it ended
    const send = (m: ToChild) => child.connected && child.send(m, () => {});
    let done = false;
    let error: Error | null = null;
    let stopSent = false;
    child.on("message", (m: FromChild) => {
      switch (m.type) {
        case "start":
          // once stop() said so, no job starts (as the pool drops its queue): one the child started before
          // it heard "stop" is not heard of
          if (stopSent) return;
          started.set(m.at, performance.now());
          options.onStart?.(jobs[m.at]!);
          return;
        case "outcome":
          if (!started.has(m.at)) return;
          finished.add(m.at);
          options.onOutcome?.(jobs[m.at]!, m.outcome);
          if (!stopSent && options.stop?.()) {
            stopSent = true;
            send({ type: "stop" });
          }
          return;
        case "done":
          done = true;
          return;
        case "error":
          error = m.error.code !== null ? new ClipParityError(m.error.code, m.error.message, m.error.exitCode ?? 2) : new Error(m.error.message);
          return;
      }
    });
    child.on("error", (err) => {
      children.delete(child);
      child.kill("SIGKILL");
      reject(new Error(`internal: the process that runs the jobs failed: ${err.message}`));
    });
    // "close" comes after the exit and after the last message was read (the IPC channel closed too)
    child.on("close", (code, signal) => {
      children.delete(child);
      if (error) reject(error);
      else if (done && code === 0) resolve(null);
      else resolve(signal ?? `exit code ${code}`);
    });
    send({ type: "run", jobs, options: settings });
  });
}

/**
 * `runJobs` with the pool in a child process, under a supervisor: the same outcomes, and a job whose
 * subject ends the whole process fails alone (its fault names its `label` and the signal) while the others
 * run on. Outcomes in job order; a job dropped by `stop()` has none.
 */
export async function runJobsSupervised(jobs: readonly Job[], options: SupervisedOptions = {}): Promise<(JobOutcome | undefined)[]> {
  const out: (JobOutcome | undefined)[] = new Array(jobs.length);
  const place = new Map(jobs.map((job, i) => [job, i]));
  const settings: PoolSettings = { workers: options.workers, timeoutMs: options.timeoutMs, graceMs: options.graceMs, memoryBudgetBytes: options.memoryBudgetBytes, heapMb: options.heapMb };
  const record = (job: Job, o: JobOutcome) => {
    out[place.get(job)!] = o;
    options.onOutcome?.(job, o);
  };
  const stopped = () => options.stop?.() === true;
  let remaining: readonly Job[] = jobs;
  /** Jobs that were in flight when a child died, not yet rerun: each runs next, alone in a fresh child. */
  const suspects: Job[] = [];
  let idleDeaths = 0;
  while (remaining.length && !stopped()) {
    const alone = suspects.length > 0;
    const batch = alone ? [suspects[0]!] : remaining;
    const started = new Map<number, number>();
    const finished = new Set<number>();
    const death = await runInChild(batch, alone ? { ...settings, workers: 1 } : settings, { ...options, onOutcome: record }, started, finished);
    const ended = new Set([...finished].map((at) => batch[at]!));
    const inFlight = [...started.keys()].filter((at) => !finished.has(at));
    if (death === null && !alone) break; // the whole batch ran (or stop() dropped the rest)
    if (death !== null && alone && inFlight.length) {
      // alone in its process, and the process died under it again: this job is the one
      const job = batch[0]!;
      record(job, {
        fault: `${job.label ?? `job ${job.index}`} ended the whole process that ran it by ${death}, and again when it ran alone in a fresh process (process.kill, a native crash or an abort in the subject's code); the run went on in a new process`,
        ms: performance.now() - started.get(0)!,
      });
      ended.add(job);
    }
    if (death !== null && !alone) suspects.push(...inFlight.map((at) => batch[at]!));
    if (alone && ended.has(batch[0]!)) suspects.shift();
    // a child that dies before any job ran is the harness's own failure (a broken installation): twice in a row, give up
    if (death !== null && !started.size && ++idleDeaths >= 2) throw new Error(`internal: the process that runs the jobs died twice before it started any (${death})`);
    if (started.size) idleDeaths = 0;
    remaining = remaining.filter((j) => !ended.has(j));
  }
  return out;
}

/** The child's side (supervisor-entry.mjs): runs one batch through the pool, reports each job, exits. */
export function serveJobs(): void {
  const send = (m: FromChild, then?: () => void) => process.send!(m, undefined, undefined, then);
  // the supervisor gone (even by SIGKILL): nothing it started may run on
  process.on("disconnect", () => process.exit(70));
  let stop = false;
  process.on("message", (m: ToChild) => {
    if (m.type === "stop") {
      stop = true;
      return;
    }
    if (m.type !== "run") return;
    const at = new Map(m.jobs.map((job, i) => [job, i]));
    runJobs(m.jobs, {
      ...m.options,
      onStart: (job) => send({ type: "start", at: at.get(job)! }),
      onOutcome: (job, outcome) => send({ type: "outcome", at: at.get(job)!, outcome }),
      stop: () => stop,
    }).then(
      () => send({ type: "done" }, () => process.exit(0)),
      (err: Error & { code?: unknown; exitCode?: unknown }) =>
        send(
          { type: "error", error: { message: err.message, code: err instanceof ClipParityError ? err.code : null, exitCode: typeof err.exitCode === "number" ? err.exitCode : null } },
          () => process.exit(1),
        ),
    );
  });
}

/**
 * A worker: a thread that runs jobs for the pool (pool.ts), so that a subject that misbehaves takes
 * down at most this thread, never the harness, and cannot reach the verdict:
 *
 * - The pool's port arrives in workerData before any subject code loads and is kept in this module's
 *   scope; the realm is sealed (seal.ts) before the pool hears "ready": intrinsics and the harness's
 *   exports are frozen, globals closed.
 * - Each rank of a cell gets its own instance of a user subject's modules (registry.ts), so ranks meet
 *   only through the collectives.
 * - Whatever way the subject ends its turn is told to the pool, which makes it the job's `isolation`
 *   fault and replaces the worker: an uncaught exception or an unhandled rejection, process.exit()
 *   (with where it was called), timers or other handles left running after the job; a loop that never
 *   yields, or running out of heap, the pool sees from outside.
 *
 * Protocol (structured-clone messages on the private port, pool.ts `WorkerMessage`): in: { type: "run",
 * job }; out: "ready", "subject" (a subject phase starts or ends), "result" (once per job), "failed"
 * (bad input: the caller raises it), "crash". One job at a time.
 */
import { workerData, type MessagePort } from "node:worker_threads";
import type { Subject } from "../subject/api.ts";
import { isSubjectPath, loadSubject } from "../registry/registry.ts";
import type { JobHandler, JobHandlers, JobTools } from "../execute/job.ts";
import { watchSubject } from "../util/watch.ts";
import { installJudge, startJudgeThread } from "../judge/client.ts";
import type { Job, SubjectInfo, WorkerMessage } from "./pool.ts";
import { sealAddon, sealModuleLoading, sealWorker } from "./seal.ts";
import { native, REFERENCE_EXPORTS } from "../backend/native.ts";
import { harnessModules } from "./harness-modules.ts";
import { describeThrown, withoutRankQuery } from "../util/thrown.ts";
import { handles, leftRunning } from "./left-running.ts";

const port = (workerData as { port: MessagePort }).port;
// Bound now: after the seal a subject can no longer replace them, but it could have shadowed them on `process`.
const post = port.postMessage.bind(port) as (m: WorkerMessage) => void;
const activeResources = process.getActiveResourcesInfo.bind(process);
const realExit = process.exit.bind(process);
const immediate = setImmediate;
let current: number | null = null;

function crash(what: string): never {
  post({ type: "crash", index: current, what });
  realExit(70);
  throw new Error("unreachable");
}

process.exit = ((code?: number) => {
  const where = (new Error().stack ?? "").split("\n").slice(2).map((l) => l.trim()).find((l) => !l.includes("node:")) ?? "";
  crash(`the subject called process.exit(${code ?? ""})${where ? ` ${withoutRankQuery(where)}` : ""}`);
}) as typeof process.exit;
process.on("uncaughtException", (err) => crash(`uncaught exception in the subject's thread: ${describeThrown(err)}`));
process.on("unhandledRejection", (reason) => crash(`unhandled promise rejection in the subject's thread: ${describeThrown(reason)}`));

/** Subject instances by spec and rank: a user module is imported once per rank of this worker. */
const instances = new Map<string, Promise<Subject>>();

function instance(spec: string, rank: number): Promise<Subject> {
  const key = isSubjectPath(spec) ? `${rank}\t${spec}` : spec;
  let s = instances.get(key);
  if (!s) instances.set(key, (s = loadSubject(spec, isSubjectPath(spec) ? { rank } : {})));
  return s;
}

/**
 * The subject a job runs: a built-in one as it is; a user module as one instance per rank behind a
 * subject that calls the rank's own instance (the rank comes from the harness's context, and each rank's
 * instance is imported on its first call).
 */
async function subjectFor(spec: string): Promise<Subject> {
  index.running(true); // loading a module runs its top level
  try {
    const first = await instance(spec, 0);
    if (!isSubjectPath(spec)) return first;
    return Object.freeze({
      ...first,
      clip: async (ctx, args) => (await instance(spec, ctx.rank)).clip(ctx, args),
      ...(first.afterInit ? { afterInit: async (ctx, args) => (await instance(spec, ctx.rank)).afterInit!(ctx, args) } : {}),
    } satisfies Subject);
  } finally {
    index.running(false);
  }
}

/** Tells the pool when subject code starts and stops running (its phase limit). */
const index = {
  running(on: boolean) {
    if (current !== null) post({ type: "subject", index: current, running: on });
  },
};

const tools: JobTools = Object.freeze({ subjectFor });

/** The sandbox's own kind: what the harness reads of a subject (its module's top level runs here). */
async function probe(spec: string): Promise<SubjectInfo> {
  const s = await subjectFor(spec);
  return { name: s.name, tolerance: s.tolerance, catchBy: s.catchBy ? [...s.catchBy] : undefined, shape: s.shape };
}

const HARNESS_URL = new URL("..", import.meta.url).href;

/** A registered kind's handler (execute/job.ts): its module is the harness's, loaded and sealed before any subject code. */
async function handlerOf(job: Job): Promise<JobHandler> {
  if (job.module === null) {
    if (job.kind !== "probe") throw new Error(`internal: job kind "${job.kind}" names no module`);
    return probe as JobHandler;
  }
  if (!job.module.startsWith(HARNESS_URL)) throw new Error(`internal: job kind "${job.kind}" names a module outside the harness: ${job.module}`);
  const handlers = ((await import(job.module)) as { jobs?: JobHandlers }).jobs;
  const handler = handlers && Object.hasOwn(handlers, job.kind) ? handlers[job.kind] : undefined;
  if (!handler) throw new Error(`internal: no handler for job kind "${job.kind}" in ${job.module}`);
  return handler;
}

async function run(job: Job): Promise<void> {
  current = job.index;
  const before = handles(activeResources);
  let result: unknown;
  try {
    const handler = await handlerOf(job);
    result = await handler(job.input as never, tools);
  } catch (err) {
    const e = err as Error & { code?: string; exitCode?: number };
    if (e instanceof Error && typeof e.exitCode === "number" && e.exitCode === 2) {
      post({ type: "failed", index: job.index, error: { message: e.message, code: e.code ?? null, exitCode: 2 } });
    } else {
      post({ type: "crash", index: job.index, what: `the ${job.kind === "cell" ? "cell" : job.kind} could not run: ${describeThrown(err)}` });
    }
    current = null;
    return;
  }
  const left = await leftRunning(before, immediate, activeResources);
  post({ type: "result", index: job.index, result, left });
  current = null;
}

watchSubject((on) => index.running(on));
// The judge's thread starts before any subject code loads: cells are judged there, out of this realm.
installJudge(startJudgeThread());
sealWorker(await harnessModules());
sealAddon(native(), REFERENCE_EXPORTS);
sealModuleLoading();

port.on("message", (m: { type: "run"; job: Job }) => {
  if (m.type === "run") void run(m.job);
});
post({ type: "ready" });

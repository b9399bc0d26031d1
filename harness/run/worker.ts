/**
 * A cell worker: a thread that runs cells for the pool (pool.ts), so that a subject that misbehaves
 * takes down at most this thread, never the harness. Whatever way the subject ends its turn is told
 * to the pool, which fails the cell's `isolation` check with it and replaces the worker:
 *
 * - an uncaught exception or an unhandled rejection (a throw inside setTimeout, a forgotten promise);
 * - process.exit() (reported with where it was called);
 * - timers or other handles left running after the clip returned (they would fire into a later cell);
 * - a loop that never yields, or running out of heap: the pool sees these from outside.
 *
 * Protocol (structured-clone messages on parentPort): in: { type: "run", job }; out: { type: "ready" },
 * { type: "subject", index, running }, { type: "result", index, result, recycle? }, { type: "crash",
 * index, what }. One cell at a time.
 */
import { parentPort } from "node:worker_threads";
import type { CellResult } from "../results/types.ts";
import { runCell } from "./cell.ts";
import { SubjectCache } from "./runner.ts";
import type { CellJob, WorkerMessage } from "./pool.ts";

const port = parentPort!;
const post = (m: WorkerMessage) => port.postMessage(m);
const subjects = new SubjectCache();
let current: number | null = null;

/** "TypeError: x is not a function (at my-clip.ts:12:7)": the message and the innermost frame outside node. */
export function describeThrown(err: unknown): string {
  if (!(err instanceof Error)) return `a non-Error value was thrown: ${String(err)}`;
  const frame = (err.stack ?? "").split("\n").slice(1).map((l) => l.trim()).find((l) => l.startsWith("at ") && !l.includes("node:"));
  return `${err.name}: ${err.message}${frame ? ` (${frame})` : ""}`;
}

function crash(what: string): never {
  post({ type: "crash", index: current, what });
  realExit(70);
  throw new Error("unreachable");
}

const realExit = process.exit.bind(process);
process.exit = ((code?: number) => {
  const where = (new Error().stack ?? "").split("\n").slice(2).map((l) => l.trim()).find((l) => !l.includes("node:")) ?? "";
  crash(`the subject called process.exit(${code ?? ""})${where ? ` ${where}` : ""}`);
}) as typeof process.exit;
process.on("uncaughtException", (err) => crash(`uncaught exception in the subject's thread: ${describeThrown(err)}`));
process.on("unhandledRejection", (reason) => crash(`unhandled promise rejection in the subject's thread: ${describeThrown(reason)}`));

/** Live handles by kind (Timeout, Immediate, FSReqCallback...), to find what a subject left running. */
function handles(): Map<string, number> {
  const m = new Map<string, number>();
  for (const kind of process.getActiveResourcesInfo()) m.set(kind, (m.get(kind) ?? 0) + 1);
  return m;
}

function leftRunning(before: Map<string, number>): string[] {
  const out: string[] = [];
  for (const [kind, n] of handles()) if (n > (before.get(kind) ?? 0)) out.push(`${n - (before.get(kind) ?? 0)} ${kind}`);
  return out;
}

async function run(job: CellJob): Promise<void> {
  current = job.index;
  const before = handles();
  let result: CellResult;
  try {
    post({ type: "subject", index: job.index, running: true }); // loading a module runs its top level
    const subject = await subjects.get(job.cell.subject);
    post({ type: "subject", index: job.index, running: false });
    result = await runCell(job.cell, {
      ...job.options,
      subject,
      onSubject: (running) => post({ type: "subject", index: job.index, running }),
    });
  } catch (err) {
    post({ type: "crash", index: job.index, what: `the cell could not run: ${describeThrown(err)}` });
    current = null;
    return;
  }
  // A rejection nobody awaited is reported once the microtasks drain: let that happen inside this cell.
  await new Promise((r) => setImmediate(r));
  const left = leftRunning(before);
  if (left.length) {
    result.checks.push({
      id: "isolation",
      status: "fail",
      message: `the subject left ${left.join(", ")} running after its clip returned (they would fire into a later cell); its worker was replaced`,
    });
  } else {
    result.checks.push({ id: "isolation", status: "pass", message: "" });
  }
  post({ type: "result", index: job.index, result, recycle: left.length > 0 });
  current = null;
}

/** Loads a subject module and reports whether it is a usable subject (prepareRun, before any cell). */
async function probe(spec: string): Promise<void> {
  try {
    await subjects.get(spec);
    post({ type: "probed", spec, error: null });
  } catch (err) {
    const e = err as Error & { code?: string; exitCode?: number };
    post({ type: "probed", spec, error: { message: e instanceof Error ? e.message : String(err), code: e.code ?? null, exitCode: e.exitCode ?? null } });
  }
}

port.on("message", (m: { type: "run"; job: CellJob } | { type: "probe"; spec: string }) => {
  if (m.type === "run") void run(m.job);
  else if (m.type === "probe") void probe(m.spec);
});
post({ type: "ready" });

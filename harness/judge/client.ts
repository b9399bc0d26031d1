/**
 * Where a cell is judged. A cell worker installs, before any subject code loads, a judge in a thread of
 * its own (`installJudge(startJudgeThread())`); elsewhere (the main thread, which runs no TypeScript
 * subject but in the documented in-process mode) the judge runs in place, loaded on first use.
 */
import { Worker, MessageChannel, type MessagePort } from "node:worker_threads";
import type { Backend } from "../backend/backend.ts";
import type { JudgeCellInput, JudgeRequest, Prepared, Verdict } from "./judge.ts";
import type { StatesRequest, StatesVerdict } from "./states.ts";

export interface Judge {
  prepare(input: JudgeCellInput): Promise<Prepared>;
  judge(req: JudgeRequest, backend: Backend): Promise<Verdict>;
  /** Training states compared (train.parity, resume.equal), read from `backend`'s store. */
  states(req: StatesRequest, backend: Backend): Promise<StatesVerdict>;
}

/** The judge in this realm: the same functions, called directly. */
const inPlace: Judge = {
  async prepare(input) {
    const { prepareCell } = await import("./judge.ts");
    return prepareCell(input);
  },
  async judge(req, backend) {
    const { judgeCell } = await import("./judge.ts");
    return judgeCell(req, backend);
  },
  async states(req, backend) {
    const { judgeStates } = await import("./states.ts");
    return judgeStates(req, backend);
  },
};

let installed: Judge | undefined;

/** Sets this thread's judge; once, before any subject code runs (a second call is refused). */
export function installJudge(judge: Judge): void {
  if (installed) throw new Error("the judge of this thread is already installed");
  installed = judge;
}

export function currentJudge(): Judge {
  return installed ?? inPlace;
}

/** A message to the judge thread, and its answer. */
export type JudgeCall =
  | { id: number; kind: "prepare"; input: JudgeCellInput }
  | { id: number; kind: "judge"; req: JudgeRequest; ticket: string }
  | { id: number; kind: "states"; req: StatesRequest; ticket: string };
export type JudgeAnswer = { id: number; ok: true; value: Prepared | Verdict | StatesVerdict } | { id: number; ok: false; error: { name: string; message: string; code: string | null; exitCode: number | null } };

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** The judge's error again on this side: an input error keeps its code and exit code 2. */
function rebuilt(e: { name: string; message: string; code: string | null; exitCode: number | null }): Error {
  const err = new Error(e.message) as Error & { code?: string; exitCode?: number };
  err.name = e.name;
  if (e.code !== null) err.code = e.code;
  if (e.exitCode !== null) err.exitCode = e.exitCode;
  return err;
}

/**
 * Starts this thread's judge thread (judge-worker.ts) and returns the judge that talks to it. The thread
 * and its port live in this module's scope, out of a subject's reach; the thread ends with this one.
 */
export function startJudgeThread(): Judge {
  const { port1, port2 } = new MessageChannel();
  const thread = new Worker(new URL("./judge-entry.mjs", import.meta.url), { workerData: { port: port2 }, transferList: [port2] });
  thread.unref();
  const port: MessagePort = port1;
  const post = port.postMessage.bind(port);
  const waiting = new Map<number, { resolve: (v: never) => void; reject: (e: Error) => void }>();
  let next = 1;
  let dead: Error | null = null;
  const failAll = (err: Error) => {
    dead = err;
    for (const w of waiting.values()) w.reject(err);
    waiting.clear();
  };
  thread.on("error", (err) => failAll(new Error(`the judge thread failed: ${err.message}`)));
  thread.on("exit", (code) => failAll(new Error(`the judge thread exited (code ${code})`)));
  port.on("message", (a: JudgeAnswer) => {
    const w = waiting.get(a.id);
    if (!w) return;
    waiting.delete(a.id);
    if (a.ok) w.resolve(a.value as never);
    else w.reject(rebuilt(a.error));
  });
  port.unref();
  const call = <T>(msg: DistributiveOmit<JudgeCall, "id">): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      if (dead) return reject(dead);
      const id = next++;
      waiting.set(id, { resolve: resolve as (v: never) => void, reject });
      // the port keeps this thread alive only while the judge owes an answer
      port.ref();
      post({ ...msg, id } as JudgeCall);
    }).finally(() => {
      if (waiting.size === 0) port.unref();
    });
  /** A call that reads `backend`'s store: offered for this call only, taken back if the judge never redeemed it. */
  const withStore = async <T>(backend: Backend, send: (ticket: string) => Promise<T>): Promise<T> => {
    const ticket = backend.share();
    try {
      return await send(ticket);
    } finally {
      backend.withdraw(ticket);
    }
  };
  return Object.freeze({
    prepare: (input: JudgeCellInput) => call<Prepared>({ kind: "prepare", input }),
    judge: (req: JudgeRequest, backend: Backend) => withStore(backend, (ticket) => call<Verdict>({ kind: "judge", req, ticket })),
    states: (req: StatesRequest, backend: Backend) => withStore(backend, (ticket) => call<StatesVerdict>({ kind: "states", req, ticket })),
  });
}

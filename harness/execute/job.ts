/**
 * The contract between the sandbox (harness/sandbox: the pool, its workers, the seal) and the folders
 * whose work runs there. A folder that owns a kind of job (a cell here, a train or resume case in
 * training/, a fuzz case in fuzz/, a meta cell in run/plan.ts) exports `jobs`, its handlers by kind, and
 * names the kind with `jobKind(name, import.meta.url)`; the worker imports that module (already loaded
 * and sealed before subject code runs) and calls the handler. So the sandbox imports no job's code, and
 * a new kind of job needs no change there.
 */
import type { Subject } from "../subject/api.ts";

/** What a handler gets from the worker beside its input. */
export interface JobTools {
  /** The subject a spec names, loaded in this worker (a user module: one instance per rank). */
  subjectFor(spec: string): Promise<Subject>;
}

export type JobHandler = (input: never, tools: JobTools) => Promise<unknown>;

/** A module's job handlers, by kind. */
export type JobHandlers = Readonly<Record<string, JobHandler>>;

/** A registered kind of job: where its handler lives. */
export interface JobKind {
  readonly name: string;
  readonly module: string;
}

/** Names the handler `name` of the module at `moduleUrl` (pass `import.meta.url`). */
export function jobKind(name: string, moduleUrl: string): JobKind {
  return Object.freeze({ name, module: moduleUrl });
}

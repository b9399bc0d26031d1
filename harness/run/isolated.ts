/**
 * The commands that run subject code outside `run` (train, resume, the regression cells) take the same
 * road as a cell: a worker of the pool, its wall clock, heap limit and isolation fault (pool.ts). And
 * the rule that says whether a section's case met its expectation, written once for the command line
 * and the suites.
 */
import { ownScratch, releaseScratch } from "../util/scratch.ts";
import type { CheckResult } from "../results/types.ts";
import type { ResumeCell, ResumeResult } from "../training/resume.ts";
import type { TrainCell, TrainResult } from "../training/train-parity.ts";
import type { FuzzCase } from "../fuzz/case.ts";
import type { FuzzOutcome } from "../fuzz/run.ts";
import { BUILTIN_SUBJECTS, isSubjectPath, loadSubject } from "../subject/registry.ts";
import { isolationCheck } from "../checks/isolation.ts";
import { DEFAULT_TIMEOUT_MS, probeSubjects, runJobs, type Job, type JobOutcome, type SubjectInfo } from "./pool.ts";

/**
 * A correct case must pass its check and a known-bad one must fail it: a skipped check meets neither,
 * and a subject that broke out of its worker (`isolation`) was not caught by the check it models.
 */
export function expectationMet(expect: "pass" | "fail", check: CheckResult): boolean {
  return check.id !== "isolation" && check.status === expect;
}

/** A case's result, or the isolation fault that kept its subject from handing one back. */
export type Isolated<R> = { result: R; fault: null } | { result?: R; fault: string };

export interface IsolatedOptions {
  /** Wall-clock limit of one subject phase (a clip, an afterInit), ms. */
  timeoutMs?: number;
  heapMb?: number;
  workers?: number;
}

function outcome<R>(o: JobOutcome | undefined): Isolated<R> {
  if (!o) return { fault: "the job did not run" };
  if (o.fault !== null) return { ...(o.result !== undefined ? { result: o.result as R } : {}), fault: o.fault };
  if (o.result === undefined) return { fault: "the worker handed back no result" };
  return { result: o.result as R, fault: null };
}

/** A train job: the cell, and the limit of one subject phase the world applies (the pool's is this plus a grace). */
export interface TrainJobInput {
  cell: TrainCell;
  timeoutMs: number;
}

/** A resume job: the cell, where its checkpoint goes, and the phase limit as for a train job. */
export interface ResumeJobInput {
  cell: ResumeCell;
  dir?: string;
  fromExisting?: boolean;
  scratchDir?: string;
  timeoutMs: number;
}

/** Each step runs the clip once per layout; the initial sync and the comparisons take a few more phases. */
function trainDeadline(c: TrainCell, timeoutMs: number): number {
  return timeoutMs * (c.steps + 2) * Math.max(1, c.layouts.length);
}

export async function trainIsolated(cells: readonly TrainCell[], options: IsolatedOptions = {}): Promise<Isolated<TrainResult>[]> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const jobs: Job[] = cells.map((cell, index) => ({ index, kind: "train", input: { cell, timeoutMs } satisfies TrainJobInput, deadlineMs: trainDeadline(cell, timeoutMs) }));
  return (await runJobs(jobs, { timeoutMs, heapMb: options.heapMb, workers: options.workers })).map((o) => outcome<TrainResult>(o));
}

export async function resumeIsolated(
  inputs: readonly { cell: ResumeCell; dir?: string; fromExisting?: boolean }[],
  options: IsolatedOptions = {},
): Promise<Isolated<ResumeResult>[]> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  // A checkpoint that is not kept goes to a scratch folder this thread owns, so that it is removed
  // whatever the job's end: a subject that exits or hangs after the save leaves nothing behind.
  const scratch = new Map<number, string>();
  try {
    // the uninterrupted run, the run to the checkpoint and the resumed run: about three trainings
    const jobs: Job[] = inputs.map((input, index) => {
      if (!input.dir) scratch.set(index, ownScratch("clip-parity-resume-"));
      return { index, kind: "resume", input: { ...input, scratchDir: scratch.get(index), timeoutMs } satisfies ResumeJobInput, deadlineMs: timeoutMs * (input.cell.steps + 2) * 3 };
    });
    return (
      await runJobs(jobs, {
        timeoutMs,
        heapMb: options.heapMb,
        workers: options.workers,
        onOutcome: (job) => {
          const dir = scratch.get(job.index);
          if (dir === undefined) return;
          scratch.delete(job.index);
          releaseScratch(dir);
        },
      })
    ).map((o) => outcome<ResumeResult>(o));
  } finally {
    // the jobs that never reached an outcome (the run threw)
    for (const dir of scratch.values()) releaseScratch(dir);
  }
}

/**
 * Fixed fuzz cases (the regression cells), each in a worker like a cell. `repro` is the command line a
 * failing check's message prints.
 */
export async function regressionsIsolated(inputs: readonly { fuzzCase: FuzzCase; repro: string }[], options: IsolatedOptions = {}): Promise<Isolated<FuzzOutcome>[]> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const jobs: Job[] = inputs.map((input, index) => ({ index, kind: "regression", input, deadlineMs: 4 * timeoutMs }));
  return (await runJobs(jobs, { timeoutMs, heapMb: options.heapMb, workers: options.workers })).map((o) => outcome<FuzzOutcome>(o));
}

/** The check a section reports for a case: its own check, or `isolation` when the subject broke out. */
export function sectionCheck(own: CheckResult | undefined, fault: string | null): CheckResult {
  if (fault !== null) return isolationCheck(fault);
  return own ?? { id: "isolation", status: "fail", message: "no result" };
}

/** What the harness needs to know of a subject (its shape, its class) without running its code here. */
/** Each user module's name (its defineSubject `name`), by its path; loaded in a worker as every subject is. */
export async function userSubjectNames(specs: readonly string[], timeoutMs = DEFAULT_TIMEOUT_MS): Promise<Record<string, string>> {
  const paths = specs.filter(isSubjectPath);
  const infos = await probeSubjects(paths, timeoutMs);
  return Object.fromEntries(paths.map((spec, i) => [spec, infos[i]!.name]));
}

export async function subjectInfo(spec: string): Promise<SubjectInfo> {
  if (isSubjectPath(spec)) return (await probeSubjects([spec], DEFAULT_TIMEOUT_MS))[0]!;
  const s = Object.hasOwn(BUILTIN_SUBJECTS, spec) ? BUILTIN_SUBJECTS[spec]! : await loadSubject(spec); // a built-in, or bad input
  return { name: s.name, tolerance: s.tolerance, catchBy: s.catchBy, shape: s.shape };
}

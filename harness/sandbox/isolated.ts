/**
 * The commands that run subject code outside `run` (train, resume, the regression cells) take the same
 * road as a cell: a worker of the pool, its wall clock, heap limit and isolation fault (pool.ts). And
 * the rule that says whether a section's case met its expectation, written once for the command line
 * and the suites.
 */
import type { CheckResult } from "../results/types.ts";
import { BUILTIN_SUBJECTS, isSubjectPath, loadSubject } from "../registry/registry.ts";
import { isolationCheck } from "../checks/isolation.ts";
import { DEFAULT_TIMEOUT_MS, probeSubjects, type JobOutcome, type SubjectInfo } from "./pool.ts";

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

/** A job's outcome as the result of a case run outside `run`, or the fault that kept it from one. */
export function isolatedOutcome<R>(o: JobOutcome | undefined): Isolated<R> {
  if (!o) return { fault: "the job did not run" };
  if (o.fault !== null) return { ...(o.result !== undefined ? { result: o.result as R } : {}), fault: o.fault };
  if (o.result === undefined) return { fault: "the worker handed back no result" };
  return { result: o.result as R, fault: null };
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

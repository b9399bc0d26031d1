/**
 * The verdict of a run, decided here only: `clip-parity run`'s last line and exit status, `npm test --
 * --matrix`'s verdict test and library callers all take it from this function, so the command and the
 * suite cannot disagree. A run fails when a cell fails a check (a golden drift is its cell's failing
 * `golden` check) or a section's case is not as expected; when nothing failed and every check of every
 * cell was skipped there is no verdict, never a pass.
 */
import { verdictOf } from "../results/summary.ts";
import { sectionsFailed, type SectionResult } from "../results/sections.ts";
import type { CheckResult } from "../results/types.ts";

export type RunVerdict = "PASS" | "FAIL" | "NO VERDICT";

export function runVerdict(results: readonly { readonly checks: readonly Pick<CheckResult, "status">[] }[], sections: readonly Pick<SectionResult, "cases">[] = []): RunVerdict {
  const cells = verdictOf(results);
  if (cells === "fail" || sectionsFailed(sections)) return "FAIL";
  return cells === "none" ? "NO VERDICT" : "PASS";
}

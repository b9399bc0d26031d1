/**
 * How a run is counted: a cell fails when any check fails, is skipped when no check ran (every check
 * skipped, or none at all: a cell nothing judged never counts as passed).
 */
import type { CheckResult, RunSummary } from "./types.ts";

export function cellFailed(r: { readonly checks: readonly Pick<CheckResult, "status">[] }): boolean {
  return r.checks.some((c) => c.status === "fail");
}

export function cellSkipped(r: { readonly checks: readonly Pick<CheckResult, "status">[] }): boolean {
  return r.checks.every((c) => c.status === "skip");
}

/** The verdict over a set of cells: "none" when no check ran at all, so that nothing never reads as PASS. */
export type Verdict = "pass" | "fail" | "none";

export function verdictOf(results: readonly { readonly checks: readonly Pick<CheckResult, "status">[] }[]): Verdict {
  if (results.some(cellFailed)) return "fail";
  return results.some((r) => !cellSkipped(r)) ? "pass" : "none";
}

export function summarize(results: readonly { readonly checks: readonly Pick<CheckResult, "status">[] }[]): RunSummary {
  let failed = 0;
  let skipped = 0;
  for (const r of results) {
    if (cellFailed(r)) failed++;
    else if (cellSkipped(r)) skipped++;
  }
  return { cells: results.length, passed: results.length - failed - skipped, failed, skipped };
}

/** The closing line, in the plain "N passed, N failed" form that CI log readers recognise. */
export function summaryLine(s: RunSummary): string {
  return `${s.cells} cells\ncells: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`;
}

/** How a run is counted: a cell fails when any check fails, is skipped when every check skipped. */
import type { CheckResult, RunSummary } from "./types.ts";

export function cellFailed(r: { readonly checks: readonly Pick<CheckResult, "status">[] }): boolean {
  return r.checks.some((c) => c.status === "fail");
}

export function cellSkipped(r: { readonly checks: readonly Pick<CheckResult, "status">[] }): boolean {
  return r.checks.length > 0 && r.checks.every((c) => c.status === "skip");
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

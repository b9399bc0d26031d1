import type { CheckResult, Severity } from "./types.ts";

/**
 * The checks whose failure is a performance note, not a wrong result (their declarations in harness/checks, held
 * to this list by suites/unit/severity.test.ts): here, with the result types, so that a reporter classifies a
 * result read from a file without loading the checks.
 */
export const PERFORMANCE_CHECKS: ReadonlySet<string> = new Set(["comm.budget"]);

/**
 * A result's severity: the one it carries (stamped by defineCheck), else its check's by id (a result read from a
 * file carries none). An id no check declares is a correctness failure: a result nobody can classify is never
 * downgraded to a note.
 */
export function severityOf(result: Pick<CheckResult, "id" | "severity">): Severity {
  return result.severity ?? (PERFORMANCE_CHECKS.has(result.id) ? "performance" : "correctness");
}

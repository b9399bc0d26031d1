import type { CheckInfo, CheckResult } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "fail: a drift from the golden file",
  "skip: the golden file has no entry for the cell",
  "pass: equal to the golden file",
] as const;

/**
 * The cell's numbers against the committed golden/<matrix>.json (`--golden check`): judged after the run,
 * once every cell's norms and tensor hash are known (harness/run/golden.ts compares them); a drift of any
 * cell's numbers fails it.
 */
export const golden: CheckInfo = {
  id: "golden",
  severity: "correctness",
  description: "norms and tensor hashes equal the committed golden/<matrix>.json (--golden check)",
  canFail: () => true,
};

/**
 * The `golden` result of one cell: `drift` says what differs (null: nothing), `hasEntry` whether the file
 * has the cell at all, `where` the file and `producer` what made it.
 */
export function goldenCheck(drift: string | null, hasEntry: boolean, where: string, producer: string): CheckResult {
  if (drift) return { id: golden.id, status: "fail", message: `drift from ${where} (${producer}): ${drift}` };
  if (hasEntry) return { id: golden.id, status: "pass", message: "" };
  return { id: golden.id, status: "skip", message: `no entry in ${where}` };
}

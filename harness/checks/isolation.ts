import type { CheckInfo, CheckResult } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "fail: the subject's code did not end cleanly, with the command that reruns it",
  "pass: it ended cleanly",
] as const;

/**
 * The subject ran to the end of its cell in its worker: judged by the runner from how the subject's code
 * ended (harness/sandbox/pool.ts), not from the cell's tensors, and made here only, so that no other place
 * writes an isolation verdict. Any subject can block, exit, crash or exhaust its worker on any case.
 */
export const isolation: CheckInfo = {
  id: "isolation",
  severity: "correctness",
  description: "the subject ran to the end of its cell without blocking, exiting, crashing or exhausting its worker",
  canFail: () => true,
};

/** The `isolation` result from how the subject's code ended (null: cleanly). */
export function isolationCheck(fault: string | null, repro?: string): CheckResult {
  if (fault === null) return { id: isolation.id, status: "pass", message: "" };
  return { id: isolation.id, status: "fail", message: repro ? `${fault}\n  reproduce: ${repro}` : fault };
}

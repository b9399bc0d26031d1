import type { CheckInfo, CheckResult } from "./types.ts";

/**
 * The subject ran to the end of its cell in its worker: judged by the runner from how the subject's code
 * ended (harness/run/pool.ts), not from the cell's tensors, and made here only, so that no other place
 * writes an isolation verdict. Any subject can block, exit, crash or exhaust its worker on any case.
 */
export const isolation: CheckInfo = {
  id: "isolation",
  description: "the subject ran to the end of its cell without blocking, exiting, crashing or exhausting its worker",
  canFail: () => true,
};

/** The `isolation` result from how the subject's code ended (null: cleanly). */
export function isolationCheck(fault: string | null, repro?: string): CheckResult {
  if (fault === null) return { id: isolation.id, status: "pass", message: "" };
  return { id: isolation.id, status: "fail", message: repro ? `${fault}\n  reproduce: ${repro}` : fault };
}

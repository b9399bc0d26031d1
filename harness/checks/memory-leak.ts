import { defineCheck, fail, pass, skip } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: liveness failed",
  "fail: a leak on the error path only, on a rank other than 0",
  "pass: nothing left allocated",
] as const;

/** The subject frees all it allocates: the ledger is back where it was before the clip. */
export default defineCheck({
  id: "memory.leak",
  severity: "correctness",
  description: "the subject leaves no tensor allocated after the clip",
  canFail: (f) => f.paramsWithGrad > 0,
  judge(ctx) {
    if (ctx.liveness) return skip(this.id, "liveness failed: aborted ranks could not free their tensors");
    for (const m of ctx.memory) {
      if (m.leakedBytes !== 0) {
        return fail(this.id, `rank ${m.rank}: ${m.leakedBytes.toLocaleString("en-US")} bytes still allocated after the clip`);
      }
    }
    return pass(this.id);
  },
});

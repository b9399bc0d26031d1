import { defineCheck, fail, pass } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "fail: a rank skipped a collective the others wait in",
  "pass: every collective completed",
] as const;

/** No collective mismatch and no rank waiting forever: what a real NCCL job would hang on. */
export default defineCheck({
  id: "liveness",
  severity: "correctness",
  description: "every rank issues the same collectives in the same order on each group; none hangs",
  canFail: (f) => f.world > 1,
  judge(ctx) {
    return ctx.liveness ? fail(this.id, ctx.liveness) : pass(this.id);
  },
});

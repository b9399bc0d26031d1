import { defineCheck, fail, notComparable, pass, sameNorm, skip } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: a rank raised",
  "fail: ranks an ulp apart, each within the norm's tolerance",
  "pass: every rank NaN (NaN equals NaN)",
] as const;

/** Every rank returns the same norm: a rank that reduced over fewer ranks shows here. */
export default defineCheck({
  id: "parity.ranks",
  severity: "correctness",
  description: "every rank returns the same total norm, bitwise",
  canFail: (f) => f.world > 1,
  judge(ctx) {
    const why = notComparable(ctx);
    if (why) return skip(this.id, why);
    const first = ctx.outcomes[0].value as number;
    for (const o of ctx.outcomes) {
      if (!sameNorm(o.value as number, first)) {
        return fail(this.id, `rank ${o.rank} returned ${o.value} but rank 0 returned ${first}`);
      }
    }
    return pass(this.id);
  },
});

import { defineCheck, fail, pass, skip } from "./types.ts";

/** What torch and the built-in subjects say when they refuse a non-finite norm. */
const NONFINITE_MESSAGE = /non-?finite/i;

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: the meta backend holds no values",
  "skip: the cell asks for no error (finite norm)",
  "fail: a hang instead of an error",
  "fail: some ranks raised while the others returned NaN",
  "fail: a rank other than 0 raised an unrelated error",
  "pass: every rank raised the non-finite error",
] as const;

/**
 * With error_if_nonfinite and a non-finite norm, every rank raises the non-finite error: none hangs,
 * none goes on, and none raises something else (an unrelated crash is not the error that was asked for).
 */
export default defineCheck({
  id: "errors.nonfinite",
  severity: "correctness",
  description: "with error_if_nonfinite, a non-finite norm raises on every rank and never hangs",
  canFail: (f) => f.errorIfNonfinite && !f.referenceFinite,
  judge(ctx) {
    if (ctx.backend.isMeta) return skip(this.id, "the meta backend holds no values");
    if (!ctx.errorIfNonfinite || Number.isFinite(ctx.reference.totalNorm)) {
      return skip(this.id, "the cell does not ask for an error on a non-finite norm");
    }
    if (ctx.liveness) return fail(this.id, `a non-finite norm led to a hang instead of an error: ${ctx.liveness}`);
    const quiet = ctx.outcomes.filter((o) => !o.error);
    if (quiet.length) {
      return fail(
        this.id,
        `the norm is ${ctx.reference.totalNorm} but rank(s) ${quiet.map((o) => o.rank).join(",")} returned ` +
          `${quiet[0].value} instead of raising`,
      );
    }
    const other = ctx.outcomes.find((o) => !NONFINITE_MESSAGE.test(o.error!.message));
    if (other) return fail(this.id, `rank ${other.rank} raised, but not for the non-finite norm: ${other.error!.message.split("\n")[0]}`);
    return pass(this.id, `raised on all ${ctx.outcomes.length} ranks`);
  },
});

import { defineCheck, fail, pass } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "tolerate: a raise on a cell that asks for the non-finite error",
  "fail: a rank other than 0 raised on a cell that asks for no error",
  "pass: no rank raised",
] as const;

/**
 * No rank raises where nothing asked it to: the only raise a clip may make is error_if_nonfinite's, on a
 * cell whose reference norm is non-finite (errors.nonfinite judges that it is that error, on every rank).
 * A raise is its own finding, not a wrong norm: parity.norm and the other value checks skip a cell where a
 * rank raised and name this check, so that one raise is reported once, by what it is.
 */
export default defineCheck({
  id: "errors.raised",
  severity: "correctness",
  description: "no rank raises, except error_if_nonfinite's error on a non-finite norm",
  // any clip can raise on any cell, except on one that asks for error_if_nonfinite's raise (tolerated here)
  canFail: (f) => !(f.errorIfNonfinite && !f.referenceFinite),
  judge(ctx) {
    const ref = ctx.reference.totalNorm;
    if (ctx.errorIfNonfinite && !Number.isFinite(ref)) return pass(this.id, "the cell asks for an error (errors.nonfinite judges it)");
    const raised = ctx.outcomes.filter((o) => o.error);
    if (!raised.length) return pass(this.id);
    const first = raised[0]!;
    const others = raised.length > 1 ? ` (ranks ${raised.map((o) => o.rank).join(", ")} raised)` : "";
    return fail(
      this.id,
      `rank ${first.rank} raised on a cell that asks for no error (reference norm ${ref}, error_if_nonfinite ${ctx.errorIfNonfinite})${others}: ` +
        first.error!.message.split("\n")[0],
    );
  },
});

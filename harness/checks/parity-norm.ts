import { defineCheck, fail, normTolerance, pass, sameNorm, skip } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: the meta backend holds no values",
  "skip: liveness failed",
  "skip: a rank other than 0 raised on a cell that asks for no error (errors.raised reports it)",
  "tolerate: every rank raised for a non-finite norm it was asked to refuse",
  "fail: a rank returned something other than a number",
  "fail: a norm that is not a float32 value",
  "fail: outside the tolerance on a rank other than 0",
  "pass: within the tolerance (an ulp off under fp32)",
  "exact class: an ulp off fails",
  "non-finite reference: compared bitwise (Inf is not NaN)",
] as const;

/** The reported norm against the reference, within the subject's tolerance class (SPEC §6). */
export default defineCheck({
  id: "parity.norm",
  severity: "correctness",
  description: "every rank's total norm is a float32 value equal to the reference within the subject's tolerance class",
  canFail: (f) => f.referenceFinite && f.paramsWithGrad > 0,
  judge(ctx) {
    if (ctx.backend.isMeta) return skip(this.id, "the meta backend holds no values");
    if (ctx.liveness) return skip(this.id, "liveness failed");
    const ref = ctx.reference.totalNorm;
    const expectRaise = ctx.errorIfNonfinite && !Number.isFinite(ref);
    // a raise is not a wrong norm: errors.raised reports it, once (and a cell with a raise is judged by it,
    // whatever the other ranks returned)
    const raised = expectRaise ? undefined : ctx.outcomes.find((o) => o.error);
    if (raised) return skip(this.id, `rank ${raised.rank} raised (errors.raised)`);
    for (const o of ctx.outcomes) {
      if (o.error) continue;
      const norm = o.value as number;
      if (typeof norm !== "number") return fail(this.id, `rank ${o.rank} returned ${String(norm)}, not a number`);
      // The norm is reported as a float32 value in every class (SPEC §6): a float64 norm within the
      // tolerance is still not what torch returns, and its clip coefficient differs from torch's.
      if (Math.fround(norm) !== norm && !Number.isNaN(norm)) {
        return fail(
          this.id,
          `rank ${o.rank} returned ${norm}, which is not a float32 value (the nearest float32 is ${Math.fround(norm)}): ` +
            `the total norm must be returned as float32`,
        );
      }
      const bound = normTolerance(ctx.tolerance, ctx.cell.normType, ctx.reference.elementsWithGrad);
      let ok: boolean;
      if (!Number.isFinite(ref) || !Number.isFinite(norm) || ctx.tolerance === "exact") ok = sameNorm(norm, ref);
      else ok = Math.abs(norm - ref) <= bound * ref;
      if (!ok) {
        const rel = ref === 0 ? Infinity : Math.abs(norm - ref) / ref;
        // fp32-accum's bound depends on the cell: say what it was
        const cls = ctx.tolerance === "fp32-accum" ? `fp32-accum: ${bound.toExponential(3)} for ${ctx.reference.elementsWithGrad} elements` : ctx.tolerance;
        return fail(this.id, `rank ${o.rank}: total norm ${norm} != reference ${ref} (relative error ${rel.toExponential(3)}, tolerance ${cls})`);
      }
    }
    return pass(this.id);
  },
});

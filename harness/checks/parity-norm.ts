import { defineCheck, fail, normTolerance, pass, sameNorm, skip } from "./types.ts";

/** The reported norm against the reference, within the subject's tolerance class (SPEC §6). */
export default defineCheck({
  id: "parity.norm",
  description: "every rank's total norm is a float32 value equal to the reference within the subject's tolerance class",
  canFail: (f) => f.referenceFinite && f.paramsWithGrad > 0,
  judge(ctx) {
    if (ctx.backend.isMeta) return skip(this.id, "the meta backend holds no values");
    if (ctx.liveness) return skip(this.id, "liveness failed");
    const ref = ctx.reference.totalNorm;
    const expectRaise = ctx.errorIfNonfinite && !Number.isFinite(ref);
    for (const o of ctx.outcomes) {
      if (o.error) {
        if (expectRaise) continue;
        return fail(this.id, `rank ${o.rank} raised on a cell whose reference norm is ${ref}: ${o.error.message}`);
      }
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

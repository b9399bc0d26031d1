/**
 * Test-local known-bad subject: `bucketed` that scales only when `clip_coef < 1`. With a NaN norm and
 * error_if_nonfinite=False the coefficient is NaN, `NaN < 1` is false, and the gradients keep their
 * values where torch multiplies every one by NaN. Caught by `parity.tensors` on the cpu matrix's NaN
 * cells with error_if_nonfinite=False, which it has for every norm type.
 */
import { clipCoefficient, defineSubject, normFromPowerSum } from "../../../harness/subject/api.ts";
import { checkFinite, scaleAll } from "../../../harness/subject/common.ts";
import { bucketedPowerSum } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "nan-unscaled",
  description: "bucketed, but scales only when clip_coef < 1 (a NaN coefficient leaves the gradients unscaled)",
  tolerance: "fp32",
  catchBy: ["parity.tensors"],
  async clip(rank, args) {
    const norm = normFromPowerSum(await bucketedPowerSum(rank, args), args.normType);
    checkFinite(norm, args);
    const coef = clipCoefficient(args.maxNorm, norm);
    if (coef < 1) scaleAll(rank, args.params, coef); // BUG: NaN < 1 is false
    return norm;
  },
});

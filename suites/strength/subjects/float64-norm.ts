/**
 * Test-local known-bad subject: `bucketed` that returns the float64 norm S^(1/p) instead of rounding it
 * to float32 (a one-line mistake: the `Math.fround` is missing). Within the fp32 tolerance of the
 * reference, so only parity.norm's float32 contract catches it (suites/strength/checks.test.ts).
 */
import { clipCoefficient, defineSubject } from "../../../harness/subject/api.ts";
import { checkFinite, scaleAll } from "../../../harness/subject/common.ts";
import { bucketedPowerSum } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "float64-norm",
  description: "bucketed, but the norm is returned in float64",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const { params, normType } = args;
    const total = await bucketedPowerSum(rank, args);
    const norm = normType === Infinity || normType === 1 ? total : total ** (1 / normType); // BUG: no Math.fround
    checkFinite(norm, args);
    scaleAll(rank, params, clipCoefficient(args.maxNorm, norm));
    return norm;
  },
});

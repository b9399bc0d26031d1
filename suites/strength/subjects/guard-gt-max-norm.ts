/**
 * Test-local known-bad subject: `bucketed` that scales only when `norm > max_norm`, a guard written in
 * place of torch's clamp `min(1, max_norm / (norm + 1e-6))`. Where the norm is small enough that the
 * `+ 1e-6` moves it and max_norm lies on the norm or just above it, torch still scales (clip_coef < 1)
 * and this subject does not. Caught by `parity.tensors` on the cpu matrix's boundary corners (max_norm
 * equal to the small norm and one float32 ulp above it, for every finite p) and the inf-norm `ones` cells.
 */
import { clipCoefficient, defineSubject, normFromPowerSum } from "../../../harness/subject/api.ts";
import { checkFinite, scaleAll } from "../../../harness/subject/common.ts";
import { bucketedPowerSum } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "guard-gt-max-norm",
  description: "bucketed, but gradients are scaled only when norm > max_norm (a guard instead of the clamp)",
  tolerance: "fp32",
  catchBy: ["parity.tensors"],
  async clip(rank, args) {
    const norm = normFromPowerSum(await bucketedPowerSum(rank, args), args.normType);
    checkFinite(norm, args);
    if (norm > args.maxNorm) scaleAll(rank, args.params, clipCoefficient(args.maxNorm, norm)); // BUG: torch clamps, it does not guard
    return norm;
  },
});

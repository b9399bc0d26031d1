/**
 * Test-local subject: `bucketed`'s norm, but the clip coefficient computed in the gradients' own dtype, as
 * PyTorch's clip_grads_with_norm_ does on the bfloat16 or float16 norm get_total_norm returns for such
 * gradients (harness/checks/low-precision.ts). `skew` multiplies that coefficient (a wrong one, beyond
 * rounding); `mixed` scales the rank's first gradient by the float32 coefficient and the rest by this one;
 * `rounded` is FSDP1's way instead: the float32 coefficient of the float32 norm rounded to the dtype, the norm
 * returned rounded to it too.
 * The bf16 class accepts the coefficient, the others do not (suites/strength/checks.test.ts).
 */
import { defineSubject, normFromPowerSum, clipCoefficient, type Subject } from "../../../harness/subject/api.ts";
import { checkFinite } from "../../../harness/subject/common.ts";
import { toBf16 } from "../../../harness/numerics/numerics.ts";
import { clipCoefficientIn, toF16 } from "../../../harness/checks/low-precision.ts";
import { bucketedPowerSum } from "../../../harness/subject/builtin/bucketed-core.ts";

export function coefInGradDtype(opts: { skew?: number; mixed?: boolean; rounded?: boolean } = {}): Subject {
  return defineSubject({
    name: "coef-in-grad-dtype",
    description: "bucketed, but clip_coef computed in the gradients' dtype (bf16/f16)",
    tolerance: "bf16",
    async clip(rank, args) {
      const total = await bucketedPowerSum(rank, args);
      const norm = normFromPowerSum(total, args.normType);
      checkFinite(norm, args);
      const grads = args.params.flatMap((p) => (p.grad ? [p.grad] : []));
      const dtype = grads[0]?.dtype;
      const round = dtype === "bf16" ? toBf16 : dtype === "f16" ? toF16 : null;
      if (!round) {
        grads.forEach((g) => rank.ops.scale_(g, clipCoefficient(args.maxNorm, norm)));
        return norm;
      }
      const low = (opts.rounded ? round(clipCoefficient(args.maxNorm, norm)) : clipCoefficientIn(dtype as "bf16" | "f16", args.maxNorm, norm)) * (opts.skew ?? 1);
      grads.forEach((g, i) => rank.ops.scale_(g, opts.mixed && i === 0 ? clipCoefficient(args.maxNorm, norm) : low));
      return opts.rounded ? round(norm) : norm;
    },
  });
}

export default coefInGradDtype();

/**
 * `bf16-norm`: `bucketed` that reduces in bfloat16, as PyTorch does by default for bf16 gradients
 * (the norm's dtype follows the grads'): every local partial, every value entering and leaving an
 * all_reduce and the final norm are rounded to bfloat16, so the norm is off by up to ~2^-9 relative
 * and depends on the PP/EP partition (torchtitan PRs 4135, 4312). It claims `fp32`, which it cannot
 * meet. Bug of SPEC §1; caught by `parity.norm`.
 */
import { defineSubject } from "../api.ts";
import { toBf16 } from "../../numerics/numerics.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

export default defineSubject({
  name: "bf16-norm",
  description: "partials and all_reduces in bfloat16 while claiming fp32 parity",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  clip: (rank, args) => bucketedClip(rank, args, { round: toBf16 }), // BUG: bfloat16 where float64 is needed
});

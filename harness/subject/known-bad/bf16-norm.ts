/**
 * `bf16-norm`: `bucketed` that reduces in bfloat16, as PyTorch does by default for bf16 gradients
 * (the norm's dtype follows the grads'): every local partial, every value entering and leaving an
 * all_reduce and the final norm are rounded to bfloat16, so the norm is off by up to ~2^-9 relative
 * and depends on the PP/EP partition (torchtitan PRs 4135, 4312). It claims `fp32`, which it cannot
 * meet. Bug of SPEC §1; caught by `parity.norm`.
 */
import { clipCoefficient, defineSubject, normFromPowerSum } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { checkFinite, combine, counts, localPartial, reduceOp, reductionGroupOf, scaleAll, toBf16 } from "../common.ts";

export default defineSubject({
  name: "bf16-norm",
  description: "partials and all_reduces in bfloat16 while claiming fp32 parity",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const { params, normType, maxNorm } = args;
    const op = reduceOp(normType);
    const buckets = new Map<string, { group: Group; acc: number }>();
    for (const p of params) {
      if (!counts(p)) continue;
      const group = reductionGroupOf(rank, p);
      const b = buckets.get(group.key) ?? { group, acc: 0 };
      b.acc = toBf16(combine(b.acc, toBf16(localPartial(rank.ops, p.grad, normType)), normType));
      buckets.set(group.key, b);
    }
    let total = 0;
    for (const b of buckets.values()) {
      const reduced = toBf16(await rank.allReduce(b.group, toBf16(b.acc), op));
      total = toBf16(combine(total, reduced, normType));
    }
    total = toBf16(await rank.allReduce(rank.group("pp"), toBf16(total), op));
    const norm = toBf16(normFromPowerSum(total, normType));
    checkFinite(norm, args);
    scaleAll(rank, params, clipCoefficient(maxNorm, norm));
    return norm;
  },
});

/**
 * `replica-unscaled`: `bucketed` that computes the right norm but scales only the canonical copy of
 * a tied parameter, leaving its replica on the last PP stage unclipped, so the copies drift apart
 * (the "one copy left unscaled" half of the MTP+PP / Megatron PR 7227 bugs).
 * Bug of SPEC §1; caught by `scaling.replicas` (models with a tie group, pp > 1).
 */
import { clipCoefficient, defineSubject, normFromPowerSum } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { checkFinite, combine, counts, localPartial, reduceOp, reductionGroupOf } from "../common.ts";

export default defineSubject({
  name: "replica-unscaled",
  description: "right norm, but tied replicas are not scaled",
  tolerance: "fp32",
  catchBy: ["scaling.replicas"],
  async clip(rank, args) {
    const { params, normType, maxNorm } = args;
    const op = reduceOp(normType);
    const buckets = new Map<string, { group: Group; acc: number }>();
    for (const p of params) {
      if (!counts(p)) continue;
      const group = reductionGroupOf(rank, p);
      const b = buckets.get(group.key) ?? { group, acc: 0 };
      b.acc = combine(b.acc, localPartial(rank.ops, p.grad, normType), normType);
      buckets.set(group.key, b);
    }
    let total = 0;
    for (const b of buckets.values()) total = combine(total, await rank.allReduce(b.group, b.acc, op), normType);
    total = await rank.allReduce(rank.group("pp"), total, op);
    const norm = normFromPowerSum(total, normType);
    checkFinite(norm, args);
    const coef = clipCoefficient(maxNorm, norm);
    for (const p of params) if (p.grad && p.canonical) rank.ops.scale_(p.grad, coef); // BUG: replicas skipped
    return norm;
  },
});

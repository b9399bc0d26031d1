/**
 * `inf-as-sum`: `bucketed` whose collectives always SUM, also for the inf-norm (torchtitan issues
 * 596/649): the local maxima are right, but the per-bucket and PP all_reduces add the ranks' maxima
 * instead of taking the largest. Bug of SPEC §1; caught by `parity.norm` (norm inf, world > 1).
 */
import { defineSubject } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { combine, counts, finishClip, localPartial, reductionGroupOf } from "../common.ts";

export default defineSubject({
  name: "inf-as-sum",
  description: "inf-norm reduced with SUM instead of MAX across ranks",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const { params, normType } = args;
    const op = "sum"; // BUG: should be "max" for normType === Infinity
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
    return finishClip(rank, args, total);
  },
});

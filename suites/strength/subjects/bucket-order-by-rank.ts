/**
 * Test-local known-bad subject: `bucketed` whose buckets are reduced in an order that depends on the
 * rank (odd ranks walk them backwards, as a dict keyed by local shard sizes would). Two ranks then wait
 * in different collectives: the hang a real NCCL job hits when the groups share ranks. Caught by
 * `liveness` on cells where a rank belongs to more than one reduction group.
 */
import { defineSubject } from "../../../harness/clip/api.ts";
import type { Group } from "../../../harness/layout/mesh.ts";
import { combine, counts, finishClip, localPartial, reduceOp, reductionGroupOf } from "../../../harness/clip/common.ts";

export default defineSubject({
  name: "bucket-order-by-rank",
  description: "bucketed, but odd ranks issue their bucket all_reduces in reverse order",
  tolerance: "fp32",
  catchBy: ["liveness"],
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    const buckets = new Map<string, { group: Group; acc: number }>();
    for (const p of params) {
      if (!counts(p)) continue;
      const group = reductionGroupOf(rank, p);
      const b = buckets.get(group.key) ?? { group, acc: 0 };
      b.acc = combine(b.acc, localPartial(rank.ops, p.grad, normType), normType);
      buckets.set(group.key, b);
    }
    const order = [...buckets.values()];
    if (rank.rank % 2 === 1) order.reverse(); // BUG: the collective order differs by rank
    let total = 0;
    for (const b of order) total = combine(total, await rank.allReduce(b.group, b.acc, op), normType);
    return finishClip(rank, args, await rank.allReduce(rank.group("pp"), total, op));
  },
});

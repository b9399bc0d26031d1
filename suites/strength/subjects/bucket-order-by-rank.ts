/**
 * Test-local known-bad subject: `bucketed` that issues its bucket all_reduces largest local contribution
 * first (a "reduce the big buckets early" heuristic). Each rank sorts by its own partials, so two ranks that
 * share two reduction groups can wait in different collectives: the hang a real NCCL job hits. The
 * order differs only where two buckets' partials are close and ordered differently on different ranks:
 * on the debug models that happens for the inf-norm (every bucket's max is near 2^e); for finite p the
 * regression cells (matrix/regressions.json) hold cases with buckets of comparable size. Caught by
 * `liveness`.
 */
import { defineSubject } from "../../../harness/clip/api.ts";
import type { Group } from "../../../harness/layout/mesh.ts";
import { combine, counts, finishClip, localPartial, reduceOp, reductionGroupOf } from "../../../harness/clip/common.ts";

export default defineSubject({
  name: "bucket-order-by-rank",
  description: "bucketed, but buckets are all_reduced largest local partial first (an order that differs by rank)",
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
    const order = [...buckets.values()].sort((a, b) => b.acc - a.acc); // BUG: each rank sorts by its own partials
    let total = 0;
    for (const b of order) total = combine(total, await rank.allReduce(b.group, b.acc, op), normType);
    return finishClip(rank, args, await rank.allReduce(rank.group("pp"), total, op));
  },
});

/**
 * `exact`: `bucketed` with exact accumulators exchanged instead of floating partial sums.
 *
 * Each bucket (one per reduction group) holds an exact power sum (an integer times 2^-1074): local
 * sums, all_reduces and the final additions never round, so the norm does not depend on the layout,
 * the bucket order or the summation order, and equals the reference bitwise. For inf the partials
 * are maxima (exact anyway) reduced with MAX.
 */
import { defineSubject, type Exact } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { counts, finishClip, reductionGroupOf } from "../common.ts";

export default defineSubject({
  name: "exact",
  description: "bucketed with exact accumulators in the all_reduces: bitwise layout-independent",
  tolerance: "exact",
  async clip(rank, args) {
    const { params, normType } = args;
    const ops = rank.ops;
    const pp = rank.group("pp");

    if (normType === Infinity) {
      const buckets = new Map<string, { group: Group; max: number }>();
      for (const p of params) {
        if (!counts(p)) continue;
        const group = reductionGroupOf(rank, p);
        const b = buckets.get(group.key) ?? { group, max: 0 };
        b.max = Math.max(b.max, ops.maxAbs(p.grad));
        buckets.set(group.key, b);
      }
      let max = 0;
      for (const b of buckets.values()) max = Math.max(max, await rank.allReduce(b.group, b.max, "max"));
      return finishClip(rank, args, await rank.allReduce(pp, max, "max"));
    }

    const buckets = new Map<string, { group: Group; acc: Exact }>();
    for (const p of params) {
      if (!counts(p)) continue;
      const group = reductionGroupOf(rank, p);
      const b = buckets.get(group.key) ?? { group, acc: ops.exactZero() };
      b.acc = ops.exactAdd(b.acc, ops.exactSumAbsPow(p.grad, normType));
      buckets.set(group.key, b);
    }
    let total = ops.exactZero();
    for (const b of buckets.values()) total = ops.exactAdd(total, await rank.allReduce(b.group, b.acc, "sum"));
    total = await rank.allReduce(pp, total, "sum");
    return finishClip(rank, args, ops.exactToNumber(total));
  },
});

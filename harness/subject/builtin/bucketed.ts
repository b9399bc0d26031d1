/**
 * `bucketed`: transformers' clip after PR 46113 (no full replicas any more).
 *
 * Each rank computes norm^p of its LOCAL shards in float64 and adds them into buckets keyed by the
 * process group the shard must be reduced over (the param's mesh and its Shard axes), issues
 * one all_reduce per bucket (a Partial(sum) gradient's partials are summed over its Partial axes first), adds the buckets, and all_reduces over pp. Only the canonical copy of a
 * tied parameter counts; every copy is scaled.
 */
import { defineSubject } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { combine, counts, finishClip, reduceOp, reductionGroupOf, summedPartial } from "../common.ts";

export default defineSubject({
  name: "bucketed",
  description: "transformers after PR 46113: local norm^p, one all_reduce per reduction group, then pp",
  tolerance: "fp32",
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    const buckets = new Map<string, { group: Group; acc: number }>();
    for (const p of params) {
      if (!counts(p)) continue; // no grad, or a tied replica: its canonical copy counts
      const group = reductionGroupOf(rank, p);
      const b = buckets.get(group.key) ?? { group, acc: 0 };
      b.acc = combine(b.acc, await summedPartial(rank, p, normType), normType);
      buckets.set(group.key, b);
    }
    let total = 0;
    for (const b of buckets.values()) total = combine(total, await rank.allReduce(b.group, b.acc, op), normType);
    total = await rank.allReduce(rank.group("pp"), total, op);
    return finishClip(rank, args, total);
  },
});

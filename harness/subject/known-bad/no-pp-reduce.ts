/**
 * `no-pp-reduce`: `bucketed` without the pipeline all_reduce (torchtitan issue 596): each PP stage
 * reports and clips with the norm of its own layers only. Bug of SPEC §1; caught by `parity.norm`
 * (on any layout with pp > 1).
 */
import { defineSubject } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { combine, counts, finishClip, localPartial, reduceOp, reductionGroupOf } from "../common.ts";

export default defineSubject({
  name: "no-pp-reduce",
  description: "bucketed without the PP all_reduce (torchtitan issue 596)",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
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
    let total = 0;
    for (const b of buckets.values()) total = combine(total, await rank.allReduce(b.group, b.acc, op), normType);
    // BUG: no all_reduce over rank.group("pp")
    return finishClip(rank, args, total);
  },
});

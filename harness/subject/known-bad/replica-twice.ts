/**
 * `replica-twice`: `bucketed` that counts a tied parameter once per physical copy: the MTP
 * embedding replica (or a tied output) on the last PP stage is added to the norm as well as the
 * canonical copy on stage 0 (torchtitan MTP+PP, Megatron PR 7227: 40 instead of 28.28).
 * Bug of SPEC §1; caught by `parity.norm` (models with a tie group, pp > 1).
 */
import { defineSubject } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { combine, finishClip, localPartial, reduceOp, reductionGroupOf } from "../common.ts";

export default defineSubject({
  name: "replica-twice",
  description: "counts tied replicas in the norm as well as their canonical copy",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    const buckets = new Map<string, { group: Group; acc: number }>();
    for (const p of params) {
      if (!p.grad) continue; // BUG: replicas (canonical === false) are not skipped
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

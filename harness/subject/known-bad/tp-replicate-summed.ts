/**
 * `tp-replicate-summed`: `bucketed` that reduces every dense param over the tp axis, as if it were
 * sharded there: the grads of Replicate-on-TP params (norms, routers) are identical on every TP rank
 * and get summed tp times (NeMo-RL PR 3788). Bug of SPEC §1; caught by `parity.norm` (tp > 1).
 */
import { defineSubject } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { combine, counts, finishClip, localPartial, reduceOp } from "../common.ts";

export default defineSubject({
  name: "tp-replicate-summed",
  description: "Replicate-on-tp grads summed over tp: counted tp times",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    const buckets = new Map<string, { group: Group; acc: number }>();
    for (const p of params) {
      if (!counts(p)) continue;
      // BUG: the tp axis is always reduced over, whatever its placement
      const flags = p.placements.map((x, i) => x.kind !== "replicate" || p.meshAxes[i] === "tp");
      const group = rank.groupOf(p, flags);
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

/**
 * `titan`: torchtitan's `clip_grad_norm_` (torchtitan/distributed/utils.py).
 *
 * Norms are computed per device mesh: the dense params (DTensors on the dense mesh) and the expert
 * params (on the sparse mesh, EP) separately, each over the "logical subset" of the params (a tied
 * replica is skipped: only the canonical copy counts), each rank counting a shard only where its
 * coordinate is 0 on the param's Replicate axes (and Partial axes, once its partials are summed). The EP and non-EP power sums are combined locally
 * (both meshes span the same ranks of a PP stage) and reduced with ONE all_reduce over the whole
 * stage, then the PP all_reduce (MAX for inf). Every rank issues exactly these two collectives, even a
 * rank with no experts or no params at all: no rank can skip a collective (torchtitan PR 1541).
 */
import { defineSubject } from "../api.ts";
import { combine, counts, finishClip, leaderMeasure, localPartial, reduceOp, stageGroup } from "../common.ts";

export default defineSubject({
  name: "titan",
  description: "torchtitan clip_grad_norm_: per-mesh norms, EP and non-EP combined, one stage all_reduce, PP all_reduce",
  tolerance: "fp32",
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    let dense = 0;
    let sparse = 0; // expert params, on the EP mesh
    for (const p of params) {
      const local = counts(p) ? await leaderMeasure(rank, p, (g) => localPartial(rank.ops, g, normType)) : null; // Partial: summed first
      if (local === null) continue; // no gradient, a tied replica, or not the one rank that counts it
      if (p.mesh === "sparse") sparse = combine(sparse, local, normType);
      else dense = combine(dense, local, normType);
    }
    let total = combine(dense, sparse, normType);
    total = await rank.allReduce(stageGroup(rank), total, op);
    total = await rank.allReduce(rank.group("pp"), total, op);
    return finishClip(rank, args, total);
  },
});

/**
 * `ep-skip-empty`: torchtitan's EP clip path (`_clip_grad_norm_with_ep`) before PR 1541, on a PP rank
 * that owns no expert gradients.
 *
 * Like `titan`, but the expert (sparse mesh) norm is reduced on its own: an all_reduce over the
 * sparse stage group and then its own PP all_reduce, and the non-EP norm likewise over the dense stage
 * group and PP. A rank whose `ep_grads` list is empty skips both EP collectives. When some PP stage has
 * no MoE layer (deepseek-v3-debug with pp >= 4: stage 0 holds only the dense layer 0) its ranks issue
 * one PP all_reduce fewer than the other stages, which wait forever: the hang a real NCCL job hits (real
 * torchtitan raised on `.full_tensor()` of a plain tensor there; either way the rank never reaches the
 * collective). Where every stage owns experts, or none does, the norm and the scaling are right.
 * Bug of SPEC §1 (a PP rank with no expert layers skipping a collective); caught by `liveness`.
 * (Its four collectives per clip also exceed `comm.budget` on layouts with fewer reduction groups.)
 */
import { defineSubject } from "../api.ts";
import { combine, counts, finishClip, isReplicaLeader, localPartial, reduceOp, SPARSE_STAGE_AXES, stageGroup } from "../common.ts";

export default defineSubject({
  name: "ep-skip-empty",
  description: "EP norm reduced separately (own PP all_reduce), skipped by ranks without experts (torchtitan PR 1541)",
  tolerance: "fp32",
  catchBy: ["liveness"],
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    const pp = rank.group("pp");
    const epGrads = params.filter((p) => p.grad && p.mesh === "sparse");
    let dense = 0;
    let ep = 0;
    for (const p of params) {
      if (!counts(p) || !isReplicaLeader(rank, p)) continue;
      const local = localPartial(rank.ops, p.grad, normType);
      if (p.mesh === "sparse") ep = combine(ep, local, normType);
      else dense = combine(dense, local, normType);
    }
    if (epGrads.length > 0) {
      // BUG: only ranks that own expert grads enter these two collectives
      ep = await rank.allReduce(rank.group(...SPARSE_STAGE_AXES), ep, op);
      ep = await rank.allReduce(pp, ep, op);
    }
    dense = await rank.allReduce(stageGroup(rank), dense, op);
    dense = await rank.allReduce(pp, dense, op);
    return finishClip(rank, args, combine(dense, ep, normType));
  },
});

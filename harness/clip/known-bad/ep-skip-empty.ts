/**
 * `ep-skip-empty`: torchtitan's clip before PR 1541 fixed it. The EP (sparse mesh) norm is reduced
 * on its own: over the sparse stage group and then with its own PP all_reduce; the non-EP norm the
 * same way. A rank that owns no expert gradients skips both EP collectives. When some PP stage has
 * no MoE layer (deepseek-v3-debug with pp >= 4: stage 0 holds only the dense layer 0) its ranks issue
 * one PP all_reduce fewer than the others, which wait forever: a hang. Where every stage owns experts
 * (or none does) it is correct.
 * Bug of SPEC §1 (a PP rank with no expert layers skipping a collective); caught by `liveness`.
 */
import { defineSubject } from "../api.ts";
import { combine, counts, finishClip, isReplicaLeader, localPartial, reduceOp, SPARSE_STAGE_AXES, stageGroup } from "../common.ts";

export default defineSubject({
  name: "ep-skip-empty",
  description: "EP norm reduced separately and skipped on ranks without experts (torchtitan PR 1541)",
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
      // BUG: only ranks that own experts enter these collectives
      ep = await rank.allReduce(rank.group(...SPARSE_STAGE_AXES), ep, op);
      ep = await rank.allReduce(pp, ep, op);
    }
    dense = await rank.allReduce(stageGroup(rank), dense, op);
    dense = await rank.allReduce(pp, dense, op);
    return finishClip(rank, args, combine(dense, ep, normType));
  },
});

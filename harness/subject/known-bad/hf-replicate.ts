/**
 * `hf-replicate`: transformers' clip BEFORE PR 46113.
 *
 * Every DTensor gradient is materialized as a full replica (`DTensor.full_tensor()`: one all_gather
 * per sharded mesh axis, innermost axis first, so a dim split by several axes, outer axis first, is
 * rebuilt chunk by chunk) and the whole list is kept alive while the norm is computed on the full
 * tensors: O(global params) scratch on every rank (about 61 GB on Qwen3-30B-A3B at tp=8, fsdp=2).
 * The norm itself is right (canonical copies of full tensors, then the pp all_reduce), but the list
 * of gathered GRADS is then handed to `clip_grads_with_norm_`, which expects PARAMETERS: the scaling
 * lands on the temporary copies, which are dropped, and `p.grad` stays unscaled.
 *
 * Bugs of SPEC §1: the full-replica OOM and grads passed as params. Caught by `memory.peak` and
 * `scaling.nonempty`.
 */
import { clipCoefficient, defineSubject, normFromPowerSum, type ParamView, type RankContext, type Tensor } from "../api.ts";
import { checkFinite, combine, localPartial, reduceOp } from "../common.ts";

/** DTensor.full_tensor(): all_gather each sharded axis, innermost first; always a new tensor. */
async function fullTensor(rank: RankContext, p: ParamView, grad: Tensor): Promise<Tensor> {
  let t = grad;
  for (let i = p.placements.length - 1; i >= 0; i--) {
    const pl = p.placements[i]!;
    if (pl.kind !== "shard") continue;
    const gathered = await rank.allGather(rank.groupOf(p.mesh, [p.meshAxes[i]!]), t, pl.dim);
    if (t !== grad) rank.ops.free(t);
    t = gathered;
  }
  return t === grad ? rank.ops.clone(grad) : t;
}

export default defineSubject({
  name: "hf-replicate",
  description: "transformers before PR 46113: full replica of every grad, then the grads passed as params",
  tolerance: "fp32",
  catchBy: ["memory.peak", "scaling.nonempty"],
  async clip(rank, args) {
    const { params, normType, maxNorm } = args;
    const op = reduceOp(normType);
    // grads = [p.grad.full_tensor() for p in parameters if p.grad is not None]
    const grads: { full: Tensor; canonical: boolean }[] = [];
    try {
      for (const p of params) if (p.grad) grads.push({ full: await fullTensor(rank, p, p.grad), canonical: p.canonical });
      let total = 0;
      for (const g of grads) if (g.canonical) total = combine(total, localPartial(rank.ops, g.full, normType), normType);
      total = await rank.allReduce(rank.group("pp"), total, op);
      const norm = normFromPowerSum(total, normType);
      checkFinite(norm, args);
      // BUG: clip_grads_with_norm_(grads, ...): the gathered copies are scaled, not the params' grads.
      const coef = clipCoefficient(maxNorm, norm);
      for (const g of grads) rank.ops.scale_(g.full, coef);
      return norm;
    } finally {
      for (const g of grads) rank.ops.free(g.full);
    }
  },
});

/**
 * `titan-mtp`: the optimizer-owned clipper of a PP trainer with a weight shared across stages
 * (torchtitan's DeepSeek-V3 MTP layer holds a copy of `tok_embeddings.weight` on the last stage).
 *
 * - after initialisation (each PP stage seeded differently) the tied copies are synchronized from
 *   the canonical copy: one broadcast on each tie group;
 * - before clipping, the copies' partial gradients are finalized: one all_reduce(sum) on each tie
 *   group, so every copy holds the logical gradient;
 * - the norm is computed over the logical parameters only (replicas never count), with exact
 *   accumulators as `exact` exchanges them, then one coefficient scales the logical parameters and,
 *   from the same total norm, the replicas (`clip_grads_with_norm_(replicas, max_norm, total_norm)`).
 * Claims `exact`: bitwise equal to the reference on every layout, so training agrees bitwise too.
 */
import { defineSubject } from "../api.ts";
import { exactPowerSum, finishClip } from "../common.ts";
import { finalizeTied, syncTied } from "../optimizer.ts";

export default defineSubject({
  name: "titan-mtp",
  description: "optimizer-owned clipper: tied copies synced after init, finalized before the norm, norm over logical params, same coef on replicas",
  tolerance: "exact",
  shape: "optimizer",
  async afterInit(rank, { params }) {
    await syncTied(rank, params);
  },
  async clip(rank, args) {
    await finalizeTied(rank, args.params);
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    return finishClip(rank, args, total); // one coefficient on every copy: logical and replicas
  },
});

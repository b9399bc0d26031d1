/**
 * `titan-mtp`: the optimizer-owned clipper of a PP trainer with a weight shared across stages
 * (torchtitan's DeepSeek-V3 MTP layer holds a copy of `tok_embeddings.weight` on the last stage).
 *
 * - after initialisation (each PP stage seeded differently) the tied copies are synchronized from
 *   the canonical copy: one broadcast on each tie group;
 * - before clipping, the copies' partial gradients are finalized: one all_reduce(sum) on each tie
 *   group, so every copy holds the logical gradient;
 * - the norm is computed over the logical parameters only (replicas never count), with exact
 *   accumulators as `exact` exchanges them, then `clip_grads_with_norm_` scales the logical
 *   parameters and, with the same total norm, the replicas.
 * Claims `exact`: bitwise equal to the reference on every layout, so training agrees bitwise too.
 */
import { clipCoefficient, defineSubject, normFromPowerSum } from "../api.ts";
import { checkFinite, exactPowerSum } from "../common.ts";
import { clipGradsWithNorm, finalizeTied, syncTied } from "../optimizer.ts";

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
    const norm = normFromPowerSum(total, args.normType);
    checkFinite(norm, args);
    const coef = clipCoefficient(args.maxNorm, norm);
    clipGradsWithNorm(rank, args.logical, coef);
    clipGradsWithNorm(rank, args.replicas, coef); // clip_grads_with_norm_(replicas, max_norm, total_norm)
    return norm;
  },
});

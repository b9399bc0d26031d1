/**
 * `finalize-forgotten`: `titan-mtp` that never finalizes the tied copies' gradients: the norm is taken
 * over the canonical copy's own partial (the stage-0 share of the embedding gradient), and each copy
 * is scaled while still holding its partial. Caught by `parity.norm` in the finalize regime (pp > 1).
 */
import { clipCoefficient, defineSubject, normFromPowerSum } from "../api.ts";
import { checkFinite, exactPowerSum } from "../common.ts";
import { clipGradsWithNorm, syncTied } from "../optimizer.ts";

export default defineSubject({
  name: "finalize-forgotten",
  description: "optimizer-owned clipper that clips the tied copies' unfinalized partial gradients",
  tolerance: "exact",
  shape: "optimizer",
  catchBy: ["parity.norm"],
  async afterInit(rank, { params }) {
    await syncTied(rank, params);
  },
  async clip(rank, args) {
    // BUG: no finalizeTied(rank, args.params)
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    const norm = normFromPowerSum(total, args.normType);
    checkFinite(norm, args);
    const coef = clipCoefficient(args.maxNorm, norm);
    clipGradsWithNorm(rank, args.logical, coef);
    clipGradsWithNorm(rank, args.replicas, coef);
    return norm;
  },
});

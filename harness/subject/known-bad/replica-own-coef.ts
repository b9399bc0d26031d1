/**
 * `replica-own-coef`: `titan-mtp` whose replicas are clipped by their own stage's coefficient: the
 * MTP module's clip on the last stage uses the norm of that stage's parameters (its total before the
 * pp all_reduce) instead of the global norm, so the copies of one weight are scaled differently.
 * Caught by `scaling.replicas` (pp > 1, a tied parameter).
 */
import { clipCoefficient, defineSubject, normFromPowerSum } from "../api.ts";
import { checkFinite, exactPowerSum, scaleAll } from "../common.ts";
import { finalizeTied, syncTied } from "../optimizer.ts";

export default defineSubject({
  name: "replica-own-coef",
  description: "optimizer-owned clipper that scales each replica by its own stage's coefficient",
  tolerance: "exact",
  shape: "optimizer",
  catchBy: ["scaling.replicas"],
  async afterInit(rank, { params }) {
    await syncTied(rank, params);
  },
  async clip(rank, args) {
    await finalizeTied(rank, args.params);
    const { stage, total } = await exactPowerSum(rank, args.logical, args.normType);
    const norm = normFromPowerSum(total, args.normType);
    checkFinite(norm, args);
    scaleAll(rank, args.logical, clipCoefficient(args.maxNorm, norm));
    // BUG: the stage's own norm, not the total
    scaleAll(rank, args.replicas, clipCoefficient(args.maxNorm, normFromPowerSum(stage, args.normType)));
    return norm;
  },
});

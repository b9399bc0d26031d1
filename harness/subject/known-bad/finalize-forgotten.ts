/**
 * `finalize-forgotten`: `titan-mtp` that never finalizes the tied copies' gradients: the norm is taken
 * over the canonical copy's own partial (the stage-0 share of the embedding gradient), and each copy
 * is scaled while still holding its partial. Caught by `parity.norm` in the finalize regime (pp > 1).
 */
import { defineSubject } from "../api.ts";
import { exactPowerSum, finishClip } from "../common.ts";
import { syncTied } from "../optimizer.ts";

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
    return finishClip(rank, args, total); // one coefficient on every copy: logical and replicas
  },
});

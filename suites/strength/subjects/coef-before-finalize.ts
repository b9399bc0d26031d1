/**
 * An optimizer-owned clipper that takes its norm (and so its coefficient) from the copies' partial
 * gradients before finalizing them: the canonical copy's own partial, not the logical gradient. Where the
 * harness hands the canonical copy the whole gradient (every clip regime but `finalize`) it is right.
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { exactPowerSum, finishClip } from "../../../harness/subject/common.ts";
import { finalizeTied, syncTied } from "../../../harness/subject/optimizer.ts";

export default defineSubject({
  name: "coef-before-finalize",
  description: "norm from the tied copies' partials, finalized only afterwards",
  tolerance: "exact",
  shape: "optimizer",
  async afterInit(rank, { params }) {
    await syncTied(rank, params);
  },
  async clip(rank, args) {
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    await finalizeTied(rank, args.params);
    return finishClip(rank, args, total);
  },
});

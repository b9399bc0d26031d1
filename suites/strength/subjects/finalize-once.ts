/**
 * An optimizer-owned clipper whose "already finalized" flag is set by the first clip and never reset, so
 * from the second step (or the second cell of a worker) on the tied gradients are clipped unfinalized.
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { exactPowerSum, finishClip } from "../../../harness/subject/common.ts";
import { finalizeTied, syncTied } from "../../../harness/subject/optimizer.ts";

let finalized = false;

export default defineSubject({
  name: "finalize-once",
  description: "finalizes tied gradients on the first step only (a flag never reset)",
  tolerance: "exact",
  shape: "optimizer",
  async afterInit(rank, { params }) {
    await syncTied(rank, params);
  },
  async clip(rank, args) {
    if (!finalized) await finalizeTied(rank, args.params);
    finalized = true;
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    return finishClip(rank, args, total);
  },
});

/**
 * An optimizer-owned clipper that "finalizes" tied gradients by broadcasting the canonical copy's
 * partial to every copy instead of summing the partials: bitwise right wherever the replica's partial is
 * zero (every clip regime but `finalize`).
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { exactPowerSum, finishClip } from "../../../harness/subject/common.ts";
import { syncTied } from "../../../harness/subject/optimizer.ts";

export default defineSubject({
  name: "broadcast-tied",
  description: "tied gradients broadcast from the canonical copy instead of summed over the tie group",
  tolerance: "exact",
  shape: "optimizer",
  async afterInit(rank, { params }) {
    await syncTied(rank, params);
  },
  async clip(rank, args) {
    for (const p of [...args.params].filter((q) => q.tieGroup && q.grad).sort((a, b) => a.name.localeCompare(b.name))) {
      const g = rank.tieGroupOf(p);
      if (g.ranks.length > 1) await rank.broadcastTensor(g, p.grad!, g.ranks[0]!);
    }
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    return finishClip(rank, args, total);
  },
});

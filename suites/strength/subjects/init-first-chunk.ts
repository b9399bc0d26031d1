/**
 * An optimizer-owned clipper whose init sync broadcasts only the first chunk of each tied parameter
 * (the ranks whose local block starts at 0): written for an unsharded model, it skips the other FSDP
 * chunks, which keep their own stage's initial values. Copies then differ wherever the tied parameter is
 * sharded, and the parameters drift from any layout that holds it whole. Only training shows it.
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { exactPowerSum, finishClip } from "../../../harness/subject/common.ts";
import { finalizeTied } from "../../../harness/subject/optimizer.ts";

export default defineSubject({
  name: "init-first-chunk",
  description: "tied copies synchronized after init for the first chunk only",
  tolerance: "exact",
  shape: "optimizer",
  async afterInit(rank, { params }) {
    for (const p of [...params].filter((q) => q.tieGroup).sort((a, b) => a.name.localeCompare(b.name))) {
      if (p.block.start.some((s) => s !== 0)) continue; // BUG: every chunk's copies must be synchronized
      const g = rank.tieGroupOf(p);
      await rank.broadcastTensor(g, p.param!, g.ranks[0]!);
    }
  },
  async clip(rank, args) {
    await finalizeTied(rank, args.params);
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    return finishClip(rank, args, total);
  },
});

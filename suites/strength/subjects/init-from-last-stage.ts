/**
 * An optimizer-owned clipper whose init sync broadcasts the tied copies from the last stage's copy (the
 * replica) instead of the canonical one: the copies agree with each other, but not with any layout that
 * places them on other stages. Only training shows it: a clip never calls afterInit.
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { exactPowerSum, finishClip } from "../../../harness/subject/common.ts";
import { finalizeTied } from "../../../harness/subject/optimizer.ts";

export default defineSubject({
  name: "init-from-last-stage",
  description: "tied copies synchronized from the last stage's copy after init",
  tolerance: "exact",
  shape: "optimizer",
  async afterInit(rank, { params }) {
    for (const p of [...params].filter((q) => q.tieGroup).sort((a, b) => a.name.localeCompare(b.name))) {
      const g = rank.tieGroupOf(p);
      await rank.broadcastTensor(g, p.param!, g.ranks[g.ranks.length - 1]!);
    }
  },
  async clip(rank, args) {
    await finalizeTied(rank, args.params);
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    return finishClip(rank, args, total);
  },
});

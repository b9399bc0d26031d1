import { meshesOf, reductionGroupCount, summedOverPartial, tieGroup } from "../world/context.ts";
import { defineCheck, fail, pass } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "fail: a collective over budget on a rank other than 0",
  "budget: a Partial gradient's sum is one more",
  "budget: an optimizer-owned clipper's finalize of a tied parameter is one more",
  "budget: the matrix's own budget replaces the rule",
  "pass: within budget",
] as const;

/**
 * Collectives per rank per clip <= distinct reduction groups + 1 (PP), SPEC §10. A group is a set of
 * ranks: the ranks along a parameter's Shard axes. A rank whose stage holds no parameter still gets
 * one group (the stage), so a subject may always reduce once over its stage. A Partial(sum) gradient
 * whose Partial axes span several ranks adds one: its partials are summed first (one all_reduce of the
 * tensor, as DTensor's redistribute to Replicate issues), after which those axes hold identical copies.
 */
export default defineCheck({
  id: "comm.budget",
  severity: "performance",
  description: "collectives per rank per clip <= distinct reduction groups + 1 (pp)",
  canFail: (f) => f.world > 1,
  judge(ctx) {
    const meshes = meshesOf(ctx.cell.layout);
    for (const [rank, params] of ctx.plan.entries()) {
      const groups = reductionGroupCount(meshes, rank, params);
      const partialSums = params.filter((p, i) => summedOverPartial(meshes, rank, p) && p.canonical && ctx.grads[rank][i]).length;
      // an optimizer-owned clipper finalizes tied gradients itself: one collective per tied parameter
      // whose copies span more than this rank (SPEC §5), even when two of them share the same ranks
      const ties = new Set<string>();
      if (ctx.subject.shape === "optimizer") {
        for (const p of params) {
          if (!p.tieGroup) continue;
          if (tieGroup(ctx.plan, meshes, rank, p).ranks.length > 1) ties.add(p.name);
        }
      }
      const budget = ctx.budgets.collectives ?? groups + 1 + ties.size + partialSums;
      const why =
        ctx.budgets.collectives === undefined
          ? `${groups} distinct reduction groups + 1 (pp)${ties.size ? ` + ${ties.size} tied parameter${ties.size > 1 ? "s" : ""} (finalize)` : ""}` +
            (partialSums ? ` + ${partialSums} Partial gradient${partialSums > 1 ? "s" : ""} (summed over the Partial axes)` : "")
          : "the matrix's budget";
      const c = ctx.comm[rank];
      if (c.calls > budget) {
        const kinds = Object.entries(c.byKind)
          .filter(([, v]) => v.calls)
          .map(([k, v]) => `${v.calls} ${k}`)
          .join(", ");
        return fail(
          this.id,
          `rank ${rank} issued ${c.calls} collectives (${kinds}) in one clip; budget ${budget} = ${why}`,
        );
      }
    }
    const most = Math.max(...ctx.comm.map((c) => c.calls));
    return pass(this.id, `at most ${most} collectives per rank`);
  },
});

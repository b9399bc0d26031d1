import { meshesOf, reductionGroup, stageAxes, summedOverPartial, tieGroup, type Meshes } from "../world/context.ts";
import type { CommRecord } from "../subject/api.ts";
import type { LocalParam } from "../model/plan.ts";
import { defineCheck, fail, pass } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "fail: a collective over budget on a rank other than 0",
  "budget: no pipeline, no PP reduction: one collective per reduction group",
  "budget: a collective over a group of one rank is not counted",
  "budget: a Partial gradient's sum is one more",
  "budget: an optimizer-owned clipper's finalize of a tied parameter is one more",
  "budget: the matrix's own budget replaces the rule",
  "pass: within budget",
] as const;

/** One reduction group a rank's copies need: its ranks, and the mesh axes (mesh-qualified) that span them. */
interface NeededGroup {
  ranks: number[];
  axes: Set<string>;
}

/**
 * The distinct reduction groups of a rank's copies (the ranks along each one's Shard axes) that span more
 * than this rank, keyed as the world keys process groups (the ranks, comma-joined), each with the axes that
 * span it; when there is none and the stage has several ranks, the stage itself.
 */
export function neededGroups(meshes: Meshes, rank: number, params: readonly LocalParam[]): Map<string, NeededGroup> {
  const out = new Map<string, NeededGroup>();
  for (const p of params) {
    const flags = p.placements.map((x) => x.kind === "shard");
    const g = reductionGroup(meshes, rank, p, flags);
    const e = out.get(g.key) ?? { ranks: g.ranks, axes: new Set<string>() };
    // the axes that span more than one rank: a size-1 axis adds no rank to the group
    const mesh = meshes[p.mesh];
    const axes = p.meshAxes.filter((a, i) => flags[i] && mesh.sizes[mesh.axes.indexOf(a)]! > 1);
    if (axes.length) e.axes.add(axes.join("×"));
    out.set(g.key, e);
  }
  // a group of one rank needs no collective: it is not a reduction group here
  for (const [k, g] of out) if (g.ranks.length < 2) out.delete(k);
  // a stage of several ranks whose copies are all replicated across it may still reduce once over it
  // (torchtitan's clip reduces its norm over the stage mesh whatever the placements)
  const stage = reductionGroup(meshes, rank, "dense", stageAxes(meshes.dense));
  if (!out.size && stage.ranks.length > 1) out.set(stage.key, { ranks: stage.ranks, axes: new Set(["the stage"]) });
  return out;
}

/**
 * The collectives a rank issued that reach another rank: those over a group of one rank (a PP reduction
 * over the one-stage pipeline of pp = 1, a reduction over a tp group of one) move nothing between ranks and
 * complete locally, so they are recorded but not counted. A collective whose group the runtime could not
 * name counts.
 */
export function crossRankCalls(c: CommRecord): number {
  const local = Object.entries(c.byGroup ?? {})
    .filter(([k]) => /^\d+$/.test(k))
    .reduce((n, [, v]) => n + v.calls, 0);
  return c.calls - local;
}

const rankSet = (key: string) => `{${key}}`;

/** A needed group in words: its ranks and the axes that span them, flattened ("{0,1,2,3} (dp_shard×tp)"). */
function groupWords(key: string, g: NeededGroup): string {
  return g.axes.size ? `${rankSet(key)} (${[...g.axes].join(" / ")})` : rankSet(key);
}

/**
 * Collectives per rank per clip <= distinct reduction groups + 1 for the PP reduction when there is PP
 * (SPEC §10's "+ 1 (PP)": a PP reduction exists only with pp > 1, so at pp = 1 nothing is added). A group is a
 * set of ranks: the ranks along a parameter's Shard axes; reducing over several axes at once is one
 * collective, so two meshes (dense and expert) whose reductions span the same ranks are one group, and a clip
 * that reduces per mesh dimension or per mesh where one flattened all_reduce would do goes over. A rank
 * whose stage holds no parameter still gets one group (the stage), so a subject may always reduce once over
 * its stage. A Partial(sum) gradient whose Partial axes span several ranks adds one: its partials are summed
 * first (one all_reduce of the tensor, as DTensor's redistribute to Replicate issues), after which those axes
 * hold identical copies. An optimizer-owned clipper adds one per tied parameter it finalizes itself.
 *
 * Severity: performance. Going over costs latency, never the norm (the value checks judge that); a built-in
 * suite's cell still fails on it, since users gate CI on the collective count (SPEC §10), and `unbucketed`,
 * one all_reduce per parameter, is caught by it alone.
 */
export default defineCheck({
  id: "comm.budget",
  severity: "performance",
  description: "collectives per rank per clip <= distinct reduction groups + 1 for the PP reduction when pp > 1",
  canFail: (f) => f.world > 1,
  judge(ctx) {
    const meshes = meshesOf(ctx.cell.layout);
    const pp = ctx.cell.layout.pp > 1 ? 1 : 0;
    for (const [rank, params] of ctx.plan.entries()) {
      const groups = neededGroups(meshes, rank, params);
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
      const budget = ctx.budgets.collectives ?? groups.size + pp + ties.size + partialSums;
      const c = ctx.comm[rank];
      const calls = crossRankCalls(c);
      if (calls <= budget) continue;
      const why =
        ctx.budgets.collectives === undefined
          ? `${groups.size} distinct reduction group${groups.size === 1 ? "" : "s"}${groups.size ? ` (${[...groups].map(([k, g]) => groupWords(k, g)).join(", ")})` : ""}` +
            (pp ? " + 1 (the PP reduction)" : "") +
            (ties.size ? ` + ${ties.size} tied parameter${ties.size > 1 ? "s" : ""} (finalize)` : "") +
            (partialSums ? ` + ${partialSums} Partial gradient${partialSums > 1 ? "s" : ""} (summed over the Partial axes)` : "")
          : "the matrix's budget";
      const kinds = Object.entries(c.byKind)
        .filter(([, v]) => v.calls)
        .map(([k, v]) => `${v.calls} ${k}`)
        .join(", ");
      // what each collective reduced over, as the runtime recorded its process group
      const used = Object.entries(c.byGroup ?? {})
        .filter(([, v]) => v.calls)
        .map(([k, v]) => `${v.calls} over ${rankSet(k)}${/^\d+$/.test(k) ? " (local: not counted)" : ""}`)
        .join(", ");
      const fused =
        ctx.budgets.collectives === undefined
          ? `; fused: ${[...groups]
              .filter(([, g]) => g.ranks.length > 1)
              .map(([k, g]) => `one all_reduce over ${groupWords(k, g)}`)
              .concat(pp ? ["one over the pipeline stages"] : [])
              .join(", ") || "no collective over other ranks"}`
          : "";
      return fail(
        this.id,
        `rank ${rank} issued ${c.calls} collectives${calls < c.calls ? `, ${calls} of them across ranks` : ""} (${kinds}${used ? `; ${used}` : ""}) in one clip; ` +
          `budget ${budget} = ${why}${fused}`,
      );
    }
    const most = Math.max(...ctx.comm.map(crossRankCalls));
    return pass(this.id, `at most ${most} collectives across ranks per rank`);
  },
});

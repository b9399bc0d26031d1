/**
 * The pieces of an optimizer-owned clipper (torchtitan's MTP+PP trainer) that `titan-mtp` and its
 * known-bad variants share. Each collective stays visible in the function that issues it.
 *
 * - `finalizeTied`: sum every tied copy's partial gradient over its tie group (one all_reduce per
 *   tied parameter, in name order on every rank), so that every copy holds the logical gradient.
 * - `syncTied`: broadcast every tied copy's initial values from the canonical copy's stage.
 * - the norm: common.ts's `exactPowerSum` over the logical copies only (replicas never count).
 */
import type { ParamView, RankContext } from "./api.ts";

/**
 * Tied copies on this rank, in one order on every rank: by logical name (a rank holds one copy per
 * tie group, and the stages list their parameters in different orders).
 */
function tiedOf(params: readonly ParamView[]): ParamView[] {
  return params.filter((p) => p.tieGroup).sort((a, b) => a.name.localeCompare(b.name));
}

export async function finalizeTied(rank: RankContext, params: readonly ParamView[]): Promise<void> {
  for (const p of tiedOf(params)) {
    if (!p.grad) continue; // a logical parameter without a gradient has none on any copy
    const g = rank.tieGroupOf(p);
    if (g.ranks.length > 1) await rank.allReduceTensor(g, p.grad, "sum");
  }
}

export async function syncTied(rank: RankContext, params: readonly ParamView[]): Promise<void> {
  for (const p of tiedOf(params)) {
    if (!p.param) throw new Error(`syncTied: ${p.fqn} has no parameter tensor`);
    // the canonical copy's stage comes first; a group of one rank (pp = 1) broadcasts to itself
    const g = rank.tieGroupOf(p);
    await rank.broadcastTensor(g, p.param, g.ranks[0]!);
  }
}

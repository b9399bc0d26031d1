/**
 * The pieces of an optimizer-owned clipper (torchtitan's MTP+PP trainer) that `titan-mtp` and its
 * known-bad variants share. Each collective stays visible in the function that issues it.
 *
 * - `finalizeTied`: sum every tied copy's partial gradient over its tie group (one all_reduce per
 *   tied parameter, in name order on every rank), so that every copy holds the logical gradient.
 * - `syncTied`: broadcast every tied copy's initial values from the canonical copy's stage.
 * - `exactPowerSum`: the norm over `logical` only (replicas never count), with exact accumulators as
 *   the `exact` subject exchanges them: bitwise layout-independent. Returns the stage's own total
 *   (before the pp all_reduce) and the global one.
 */
import type { ClipArgs, Exact, ParamView, RankContext } from "./api.ts";
import type { Group } from "../layout/mesh.ts";
import { counts, reductionGroupOf } from "./common.ts";

/** Tied copies on this rank, in one order on every rank (by logical name, then block). */
function tiedOf(params: readonly ParamView[]): ParamView[] {
  return params.filter((p) => p.tieGroup).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
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
    const g = rank.tieGroupOf(p);
    if (g.ranks.length > 1) await rank.broadcastTensor(g, p.param, g.ranks[0]!); // the canonical copy's stage comes first
  }
}

/** The copies the norm counts: `args.logical` (canonical copies), or `params` without replicas. */
export function logicalOf(args: ClipArgs): readonly ParamView[] {
  return args.logical ?? args.params.filter((p) => p.canonical);
}
export function replicasOf(args: ClipArgs): readonly ParamView[] {
  return args.replicas ?? args.params.filter((p) => !p.canonical);
}

/** Power sum (or max for inf) over `logical`: per reduction group, exactly; then over pp. */
export async function exactPowerSum(rank: RankContext, logical: readonly ParamView[], normType: number): Promise<{ stage: number; total: number }> {
  const ops = rank.ops;
  const pp = rank.group("pp");
  if (normType === Infinity) {
    const buckets = new Map<string, { group: Group; max: number }>();
    for (const p of logical) {
      if (!counts(p)) continue;
      const group = reductionGroupOf(rank, p);
      const b = buckets.get(group.key) ?? { group, max: 0 };
      b.max = Math.max(b.max, ops.maxAbs(p.grad));
      buckets.set(group.key, b);
    }
    let max = 0;
    for (const b of buckets.values()) max = Math.max(max, await rank.allReduce(b.group, b.max, "max"));
    return { stage: max, total: await rank.allReduce(pp, max, "max") };
  }
  const buckets = new Map<string, { group: Group; acc: Exact }>();
  for (const p of logical) {
    if (!counts(p)) continue;
    const group = reductionGroupOf(rank, p);
    const b = buckets.get(group.key) ?? { group, acc: ops.exactZero() };
    b.acc = ops.exactAdd(b.acc, ops.exactSumAbsPow(p.grad, normType));
    buckets.set(group.key, b);
  }
  let stage = ops.exactZero();
  for (const b of buckets.values()) stage = ops.exactAdd(stage, await rank.allReduce(b.group, b.acc, "sum"));
  const total = await rank.allReduce(pp, stage, "sum");
  return { stage: ops.exactToNumber(stage), total: ops.exactToNumber(total) };
}

/** torch's clip_grads_with_norm_(params, max_norm, total_norm): every gradient present scaled by one coefficient. */
export function clipGradsWithNorm(rank: RankContext, params: readonly ParamView[], coef: number): void {
  for (const p of params) if (p.grad) rank.ops.scale_(p.grad, coef);
}

/**
 * Small helpers the built-in subjects share, so that each subject module reads like the framework
 * code it models and only the part that differs between frameworks (or bugs) is spelled out.
 *
 * Collectives stay visible in the subjects themselves, with one exception: `exactPowerSum`, the exact
 * bucketed norm that `exact` and the optimizer-owned `titan-mtp` (and its known-bad variants) share.
 */
import { DENSE_STAGE_AXES, SPARSE_STAGE_AXES, type AxisName, type Group } from "../layout/mesh.ts";
import type { ClipArgs, Exact, Ops, ParamView, RankContext, ReduceOp, Tensor } from "./api.ts";
import { clipCoefficient, NonFiniteNormError, normFromPowerSum } from "./api.ts";

/** The dense mesh axes of one PP stage (every non-pp axis); the sparse mesh spans the same ranks. */
export const STAGE_AXES = DENSE_STAGE_AXES;
export { SPARSE_STAGE_AXES };

export const isInf = (normType: number): boolean => normType === Infinity;

/** The collective op that combines partials of a p-norm: MAX for inf, SUM otherwise. */
export const reduceOp = (normType: number): ReduceOp => (isInf(normType) ? "max" : "sum");

/**
 * One tensor's local contribution: sum |g|^p in float64 for finite p, max |g| for inf
 * (`torch.linalg.vector_norm(g, p) ** p` without the root, as a partial sum).
 */
export function localPartial(ops: Ops, grad: Tensor, normType: number): number {
  return isInf(normType) ? ops.maxAbs(grad) : ops.sumAbsPow(grad, normType);
}

/** Combines two partials: max for inf (NaN wins, as Math.max does), + otherwise. */
export function combine(a: number, b: number, normType: number): number {
  return isInf(normType) ? Math.max(a, b) : a + b;
}

/** Whether the param's copy on this rank counts in the norm at all: it has a gradient and is canonical. */
export function counts(p: ParamView): p is ParamView & { grad: Tensor } {
  return p.grad !== null && p.canonical;
}

/**
 * The placements' "reduce" flags: every Shard axis (aligned with meshAxes). A Partial axis is not one:
 * its partials are summed first (withSummedGrad), after which it holds identical copies, as Replicate does.
 */
export function reduceFlags(p: ParamView): boolean[] {
  return p.placements.map((x) => x.kind === "shard");
}

/** Whether the param's gradient is Partial(sum) over some axis of more than one rank: its partials must be summed. */
export function needsPartialSum(rank: RankContext, p: ParamView): boolean {
  return p.placements.some((x) => x.kind === "partial") && partialGroupOf(rank, p).ranks.length > 1;
}

/** The ranks whose partials of p's gradient add up to its logical gradient: those along its Partial axes. */
export function partialGroupOf(rank: RankContext, p: ParamView): Group {
  return rank.groupOf(p, p.placements.map((x) => x.kind === "partial"));
}

/**
 * Runs `use` on p's logical local gradient: the gradient itself, or for a Partial(sum) one the sum of
 * the partials over its Partial axes (DTensor's redistribute Partial -> Replicate: one all_reduce on a
 * scratch copy, freed after `use`). The local partial itself is left as it is, to be scaled later:
 * scaling is linear, so a Partial gradient stays Partial. Every rank of the Partial axes must call it.
 */
export async function withSummedGrad<T>(rank: RankContext, p: ParamView & { grad: Tensor }, use: (g: Tensor) => T): Promise<T> {
  if (!needsPartialSum(rank, p)) return use(p.grad);
  const sum = rank.ops.clone(p.grad);
  try {
    await rank.allReduceTensor(partialGroupOf(rank, p), sum, "sum");
    return use(sum);
  } finally {
    rank.ops.free(sum);
  }
}

/** One tensor's local contribution (localPartial) over its logical gradient (withSummedGrad). */
export function summedPartial(rank: RankContext, p: ParamView & { grad: Tensor }, normType: number): Promise<number> {
  return withSummedGrad(rank, p, (g) => localPartial(rank.ops, g, normType));
}

/**
 * `measure` of p's logical local gradient on the rank that counts it (isReplicaLeader), null elsewhere;
 * a Partial gradient is summed on every rank of its Partial axes first, as each of them must take part.
 */
export function leaderMeasure<T>(rank: RankContext, p: ParamView & { grad: Tensor }, measure: (g: Tensor) => T): Promise<T | null> {
  const leader = isReplicaLeader(rank, p);
  return withSummedGrad(rank, p, (g) => (leader ? measure(g) : null));
}

/**
 * The group a param's local partial must be reduced over: the ranks that differ from this one only on
 * its Shard axes (Replicate axes, and Partial axes once summed, hold identical copies, which must not be summed again).
 */
export function reductionGroupOf(rank: RankContext, p: ParamView): Group {
  return rank.groupOf(p, reduceFlags(p)); // flags aligned with p.meshAxes (a sub-mesh too)
}

/**
 * True on the one rank of each set of replicas that counts the param: coordinate 0 on every Replicate
 * or Partial axis of its mesh (a Partial one counts once its partials are summed: withSummedGrad), and
 * on every stage axis its sub-mesh does not span (a DTensor on a sub-mesh has one identical instance per
 * slice of the other axes). Its partial may then be reduced over any group that contains the others.
 */
export function isReplicaLeader(rank: RankContext, p: ParamView): boolean {
  const stageAxes: readonly AxisName[] = p.mesh === "sparse" ? SPARSE_STAGE_AXES : STAGE_AXES;
  return stageAxes.every((a) => {
    const i = p.meshAxes.indexOf(a);
    return (i >= 0 && p.placements[i]!.kind === "shard") || rank.coords[a] === 0;
  });
}

/** Every rank of this rank's PP stage (the dense mesh without pp). */
export function stageGroup(rank: RankContext): Group {
  return rank.group(...STAGE_AXES);
}

/** Scales every gradient present, replicas included, by one coefficient (PyTorch always scales). */
export function scaleAll(rank: RankContext, params: readonly ParamView[], coef: number): void {
  for (const p of params) if (p.grad) rank.ops.scale_(p.grad, coef);
}

/** torch's `error_if_nonfinite` check on the reduced norm; call it after every collective. */
export function checkFinite(norm: number, args: ClipArgs): void {
  if (args.errorIfNonfinite && !Number.isFinite(norm)) throw new NonFiniteNormError(args.normType, norm);
}

/**
 * The common tail of every correct clip, once the global power sum (or max) is known on this rank:
 * norm = S^(1/p) as float32, raise if asked and non-finite, else scale every copy by the clip coefficient.
 */
export function finishClip(rank: RankContext, args: ClipArgs, total: number): number {
  const norm = normFromPowerSum(total, args.normType);
  checkFinite(norm, args);
  scaleAll(rank, args.params, clipCoefficient(args.maxNorm, norm));
  return norm;
}


/** This rank's exact sums of |g|^p, one per reduction group (a tied copy counted once), before any collective. */
export async function exactBuckets(rank: RankContext, logical: readonly ParamView[], normType: number): Promise<Map<string, { group: Group; acc: Exact }>> {
  const ops = rank.ops;
  const buckets = new Map<string, { group: Group; acc: Exact }>();
  for (const p of logical) {
    if (!counts(p)) continue;
    const group = reductionGroupOf(rank, p);
    const b = buckets.get(group.key) ?? { group, acc: ops.exactZero() };
    b.acc = ops.exactAdd(b.acc, await withSummedGrad(rank, p, (g) => ops.exactSumAbsPow(g, normType)));
    buckets.set(group.key, b);
  }
  return buckets;
}

/**
 * The power sum (or max for inf) over `logical`, per reduction group with exact accumulators, then over
 * pp: bitwise layout-independent (`exact`, `titan-mtp`; a Partial gradient summed first, exactly: two
 * partials add without rounding). Returns the stage's own total (before the pp
 * all_reduce) and the global one.
 */
export async function exactPowerSum(rank: RankContext, logical: readonly ParamView[], normType: number): Promise<{ stage: number; total: number }> {
  const ops = rank.ops;
  const pp = rank.group("pp");
  if (normType === Infinity) {
    const buckets = new Map<string, { group: Group; max: number }>();
    for (const p of logical) {
      if (!counts(p)) continue;
      const group = reductionGroupOf(rank, p);
      const b = buckets.get(group.key) ?? { group, max: 0 };
      b.max = Math.max(b.max, await withSummedGrad(rank, p, (g) => ops.maxAbs(g)));
      buckets.set(group.key, b);
    }
    let max = 0;
    for (const b of buckets.values()) max = Math.max(max, await rank.allReduce(b.group, b.max, "max"));
    return { stage: max, total: await rank.allReduce(pp, max, "max") };
  }
  const buckets = await exactBuckets(rank, logical, normType);
  let stage = ops.exactZero();
  for (const b of buckets.values()) stage = ops.exactAdd(stage, await rank.allReduce(b.group, b.acc, "sum"));
  const total = await rank.allReduce(pp, stage, "sum");
  return { stage: ops.exactToNumber(stage), total: ops.exactToNumber(total) };
}

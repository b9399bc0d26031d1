/**
 * `bucketed`'s clip written once, step by step, so that every subject modelling a bug of a bucketing
 * framework (the known-bad subjects, the suite's test subjects) is this clip with exactly the step its
 * bug lives in replaced: one bug each, and no copy of the rest to drift from `bucketed`.
 *
 * The clip: each rank adds the norm^p (max for inf) of each counted gradient's logical local shard
 * into a bucket per reduction group, issues one all_reduce per bucket, adds the buckets, all_reduces
 * over pp, and scales by the clip coefficient of the resulting norm.
 */
import { clipCoefficient, normFromPowerSum, type ClipArgs, type ParamView, type RankContext, type ReduceOp, type Tensor } from "../api.ts";
import type { Group } from "../../layout/mesh.ts";
import { checkFinite, combine, counts, reduceOp, reductionGroupOf, scaleAll, summedPartial } from "../common.ts";

export interface Bucket {
  group: Group;
  /** This rank's power sum (or max) over the bucket's gradients. */
  acc: number;
}

/** The steps of the bucketed clip; BUCKETED_STEPS holds `bucketed`'s own. */
export interface BucketedSteps {
  /** Whether p's copy on this rank enters the norm: `bucketed` counts canonical copies with a gradient. */
  counts(p: ParamView): p is ParamView & { grad: Tensor };
  /** The group p's partial is all_reduced over: its Shard axes. */
  reductionGroup(rank: RankContext, p: ParamView): Group;
  /** The bucket p's partial is added to, one all_reduce each: one per reduction group. */
  bucketKey(group: Group, p: ParamView): string;
  /** p's norm^p (max for inf) on this rank: its logical local gradient's (a Partial one summed first). */
  partial(rank: RankContext, p: ParamView & { grad: Tensor }, normType: number): Promise<number>;
  /** The op every all_reduce uses: MAX for inf, SUM otherwise. */
  op(normType: number): ReduceOp;
  /** The order the buckets are all_reduced in: the order they were opened (the same on every rank). */
  order(buckets: Bucket[]): Bucket[];
  /** The stage totals combined over pp: one all_reduce. */
  reduceOverPp(rank: RankContext, stageTotal: number, op: ReduceOp): Promise<number>;
  /** The number format every partial, sum, collective and the norm are held in: float64 (none applied). */
  round(x: number): number;
  /** Scales by the clip coefficient: every gradient present, tied replicas included. */
  scale(rank: RankContext, params: readonly ParamView[], coef: number): void;
}

export const BUCKETED_STEPS: Readonly<BucketedSteps> = Object.freeze({
  counts,
  reductionGroup: reductionGroupOf,
  bucketKey: (group: Group) => group.key,
  partial: summedPartial,
  op: reduceOp,
  order: (buckets: Bucket[]) => buckets,
  reduceOverPp: (rank: RankContext, stageTotal: number, op: ReduceOp) => rank.allReduce(rank.group("pp"), stageTotal, op),
  round: (x: number) => x,
  scale: scaleAll,
});

/** The global power sum (or max) after the pp all_reduce, with `bucketed`'s steps except those in `change`. */
export async function bucketedPowerSum(rank: RankContext, args: ClipArgs, change: Partial<BucketedSteps> = {}): Promise<number> {
  const s: BucketedSteps = { ...BUCKETED_STEPS, ...change };
  const { params, normType } = args;
  const op = s.op(normType);
  const buckets = new Map<string, Bucket>();
  for (const p of params) {
    if (!s.counts(p)) continue; // no gradient, or a tied replica: its canonical copy counts
    const group = s.reductionGroup(rank, p);
    const key = s.bucketKey(group, p);
    const b = buckets.get(key) ?? { group, acc: 0 };
    b.acc = s.round(combine(b.acc, s.round(await s.partial(rank, p, normType)), normType));
    buckets.set(key, b);
  }
  let total = 0;
  for (const b of s.order([...buckets.values()])) {
    total = s.round(combine(total, s.round(await rank.allReduce(b.group, s.round(b.acc), op)), normType));
  }
  return s.round(await s.reduceOverPp(rank, s.round(total), op));
}

/** `bucketed`'s clip with the steps in `change` replaced: the norm returned, every gradient scaled. */
export async function bucketedClip(rank: RankContext, args: ClipArgs, change: Partial<BucketedSteps> = {}): Promise<number> {
  const s: BucketedSteps = { ...BUCKETED_STEPS, ...change };
  const norm = s.round(normFromPowerSum(await bucketedPowerSum(rank, args, change), args.normType));
  checkFinite(norm, args);
  s.scale(rank, args.params, clipCoefficient(args.maxNorm, norm));
  return norm;
}

/**
 * The power sum (or max) that `bucketed` reduces, for the test-local known-bad subjects that differ
 * from it only after the reduction (or in which shards open a bucket): one all_reduce per reduction
 * group, then one over pp, exactly as harness/subject/builtin/bucketed.ts does.
 */
import type { ClipArgs, ParamView, RankContext } from "../../../harness/subject/api.ts";
import type { Group } from "../../../harness/layout/mesh.ts";
import { combine, counts, localPartial, reduceOp, reductionGroupOf } from "../../../harness/subject/common.ts";

export interface Bucket {
  group: Group;
  /** This rank's partial: its power sum (or max) over the bucket's shards. */
  acc: number;
}

/** How a test-local subject's bug bends `bucketed`'s reduction; each default is bucketed's own. */
export interface BucketedBends {
  /** Shards left out of the norm. */
  leaveOut?: (p: ParamView) => boolean;
  /** The order the buckets' all_reduces are issued in (bucketed: first-seen). */
  order?: (buckets: Bucket[]) => Bucket[];
  /** The group a shard's partial is reduced over (bucketed: its Shard axes). */
  groupOf?: (rank: RankContext, p: ParamView) => Group;
}

export async function bucketedTotal(rank: RankContext, args: ClipArgs, bends: BucketedBends = {}): Promise<number> {
  const { leaveOut = () => false, order = (b) => b, groupOf = reductionGroupOf } = bends;
  const { params, normType } = args;
  const op = reduceOp(normType);
  const buckets = new Map<string, Bucket>();
  for (const p of params) {
    if (!counts(p) || leaveOut(p)) continue;
    const group = groupOf(rank, p);
    const b = buckets.get(group.key) ?? { group, acc: 0 };
    b.acc = combine(b.acc, localPartial(rank.ops, p.grad, normType), normType);
    buckets.set(group.key, b);
  }
  let total = 0;
  for (const b of order([...buckets.values()])) total = combine(total, await rank.allReduce(b.group, b.acc, op), normType);
  return rank.allReduce(rank.group("pp"), total, op);
}

/**
 * Test subjects for the checks' edge branches (issue 42): each is `bucketed` (or `titan-mtp`) with one
 * deviation that shows only where a check skips, tolerates or judges part of the ranks: on a rank other
 * than 0, by an ulp, on the error path, on one tied replica of several. The suite's older subjects
 * fail on every rank, on rank 0 or grossly, so a check that judged only rank 0 (or the first replica,
 * or the happy path) still passed the suite.
 */
import { clipCoefficient, defineSubject, normFromPowerSum, type ClipArgs, type RankContext, type Subject, type ToleranceClass } from "../../harness/subject/api.ts";
import { bucketedClip, bucketedPowerSum, type BucketedSteps } from "../../harness/subject/builtin/bucketed-core.ts";
import { checkFinite, exactPowerSum, scaleAll } from "../../harness/subject/common.ts";
import titanMtp from "../../harness/subject/builtin/titan-mtp.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import type { Cell } from "../../harness/cell/cell.ts";

/** The suites' small cell: llama3-debug on dp_shard2, f32, norm 2, active, seed 0, with `over` changed. */
export const testCell = (over: Partial<Cell> = {}): Cell => ({
  subject: "x",
  layout: parseLayout("dp_shard2"),
  model: "llama3-debug",
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  ...over,
});

/** The next float32 above a positive float32 value: one ulp up. */
export function nextUp32(x: number): number {
  const f = new Float32Array([x]);
  new Uint32Array(f.buffer)[0]! += 1;
  return f[0]!;
}

/** A subject whose clip is `clip`, claiming `tolerance` (fp32 unless told). */
export function testSubject(name: string, clip: (rank: RankContext, args: ClipArgs) => Promise<number>, tolerance: ToleranceClass = "fp32"): Subject {
  return defineSubject({ name, description: name, tolerance, clip });
}

/** `bucketed` with the steps in `change` replaced. */
export const bucketedWith = (name: string, change: Partial<BucketedSteps>): Subject => testSubject(name, (rank, args) => bucketedClip(rank, args, change));

/** `bucketed`, whose norm `rank` then reports as `report` gives it (the gradients are scaled right). */
export const reportsOn = (name: string, rank: number, report: (norm: number) => unknown, tolerance?: ToleranceClass): Subject =>
  testSubject(name, async (r, args) => {
    const norm = await bucketedClip(r, args);
    return (r.rank === rank ? report(norm) : norm) as number;
  }, tolerance);

/** Every rank reports `report(norm)`: off by an ulp, say. */
export const reportsEverywhere = (name: string, report: (norm: number) => number, tolerance?: ToleranceClass): Subject =>
  testSubject(name, async (r, args) => report(await bucketedClip(r, args)), tolerance);

/** Rank 1 raises after every collective of a right clip (its gradients already scaled). */
export const raisesAfterCollectivesOnRank1 = testSubject("raises-after-collectives-on-rank-1", async (rank, args) => {
  const norm = await bucketedClip(rank, args);
  if (rank.rank === 1) throw new Error("rank 1 failed after its collectives");
  return norm;
});

/** Rank 1 (pp stage 1 on pp2) skips the pp all_reduce: the other stage waits in it forever. */
export const skipsPpOnRank1 = bucketedWith("skips-pp-on-rank-1", {
  reduceOverPp: async (rank, stageTotal, op) => (rank.rank === 1 ? stageTotal : rank.allReduce(rank.group("pp"), stageTotal, op)),
});

/** On a non-finite norm only rank 0 raises as asked: the others return NaN (or Inf) and go on. */
export const raisesOnRank0Only = testSubject("raises-on-rank-0-only", (rank, args) =>
  bucketedClip(rank, { ...args, errorIfNonfinite: args.errorIfNonfinite && rank.rank === 0 }),
);

/** On a non-finite norm rank 1 raises something else than the non-finite error (a crash in its error path). */
export const rank1RaisesUnrelated = testSubject("rank-1-raises-unrelated", async (rank, args) => {
  try {
    return await bucketedClip(rank, args);
  } catch (err) {
    if (rank.rank === 1) throw new Error("cannot format the error: undefined is not a function");
    throw err;
  }
});

/**
 * The rank whose stage total is non-finite raises before the pp all_reduce (an early-out where torch
 * raises only after the reduction): the other stage waits in that all_reduce forever.
 */
export const raisesBeforePp = bucketedWith("raises-before-pp", {
  reduceOverPp: async (rank, stageTotal, op) => {
    if (!Number.isFinite(stageTotal)) throw new Error(`non-finite norm on stage ${rank.coords.pp}, raised before the pp all_reduce`);
    return rank.allReduce(rank.group("pp"), stageTotal, op);
  },
});

/**
 * Rank 1 holds a scratch copy of its first gradient during the clip and frees it when the clip returns,
 * but not when it raises (error_if_nonfinite): a leak on the error path only.
 */
export const leaksOnErrorPathOnRank1 = testSubject("leaks-on-error-path-on-rank-1", async (rank, args) => {
  const first = args.params.find((p) => p.grad)?.grad;
  const scratch = rank.rank === 1 && first ? rank.ops.clone(first) : null;
  const norm = await bucketedClip(rank, args); // BUG: no try/finally: a raise leaves the scratch allocated
  if (scratch) rank.ops.free(scratch);
  return norm;
});

/** Rank 1 holds `bytes` of scratch during its clip (freed): over budget there only. */
export const scratchOnRank1 = (bytes: number): Subject =>
  testSubject("scratch-on-rank-1", async (rank, args) => {
    const scratch = rank.rank === 1 ? rank.ops.empty("f32", [bytes / 4]) : null;
    try {
      return await bucketedClip(rank, args);
    } finally {
      if (scratch) rank.ops.free(scratch);
    }
  });

/** Rank 1 issues one collective more than its budget: an all_reduce over itself alone. */
export const extraCollectiveOnRank1 = bucketedWith("extra-collective-on-rank-1", {
  reduceOverPp: async (rank, stageTotal, op) => {
    const total = await rank.allReduce(rank.group("pp"), stageTotal, op);
    return rank.rank === 1 ? rank.allReduce(rank.group(), total, op) : total;
  },
});

/** Scales by the right coefficient everywhere but on `rank`, where `coefOn` gives the one used (or skips). */
export const scalesOnRank = (name: string, rank: number, coefOn: (coef: number) => number | null): Subject =>
  bucketedWith(name, {
    scale: (r, params, coef) => {
      const used = r.rank === rank ? coefOn(coef) : coef;
      if (used !== null) scaleAll(r, params, used);
    },
  });

/** Leaves the tied replicas on pipeline stage `stage` unscaled; every other copy is scaled right. */
export const replicaUnscaledOnStage = (stage: number): Subject =>
  bucketedWith(`replica-unscaled-on-stage-${stage}`, {
    scale: (r, params, coef) => scaleAll(r, params.filter((p) => p.canonical || p.stage !== stage), coef),
  });

/**
 * `titan-mtp` (an optimizer-owned clipper: it is given each tied copy's raw partial) that neither
 * finalizes nor scales the tied replicas: a replica still holds the very partial it was given.
 */
export const replicaNeverTouched: Subject = defineSubject({
  ...titanMtp,
  name: "replica-never-touched",
  async clip(rank, args) {
    const { total } = await exactPowerSum(rank, args.logical, args.normType);
    const norm = normFromPowerSum(total, args.normType);
    checkFinite(norm, args);
    scaleAll(rank, args.logical, clipCoefficient(args.maxNorm, norm)); // BUG: no finalize, replicas not scaled
    return norm;
  },
});

/** Reports its norm an ulp up on every rank and scales by that norm's coefficient: consistent, yet not the reference's. */
export const ulpUpScaledByIt = (tolerance: ToleranceClass): Subject =>
  testSubject(`ulp-up-scaled-by-its-coefficient-${tolerance}`, async (rank, args) => {
    const norm = nextUp32(normFromPowerSum(await bucketedPowerSum(rank, args), args.normType));
    scaleAll(rank, args.params, clipCoefficient(args.maxNorm, norm));
    return norm;
  }, tolerance);

/**
 * pp2: stage 1 broadcasts its power sum to stage 0, which adds its own and hands the total to stage 1
 * outside any collective (a variable both ranks share, as a file or a cache would be): rank 1 returns the
 * right norm although no collective brought it stage 0's gradients.
 */
export function sideChannelToRank1(): Subject {
  let tell!: (total: number) => void;
  const told = new Promise<number>((resolve) => (tell = resolve));
  return bucketedWith("side-channel-to-rank-1", {
    reduceOverPp: async (rank, stageTotal) => {
      const last = await rank.broadcast(rank.group("pp"), stageTotal, 1);
      if (rank.rank === 1) return told; // BUG: stage 0's share never reached this rank through a collective
      tell(stageTotal + last);
      return stageTotal + last;
    },
  });
}

/** Raises on every rank before any collective. */
export const raisesAtOnce = testSubject("raises-at-once", async () => {
  throw new Error("raised before any collective");
});

/**
 * What a set of fuzz cases covers: the features the issue asks the arbitraries to produce, counted
 * over cases (suites/fuzz/case.test.ts asserts each one shows up often enough).
 */
import { worldSize, type Layout } from "../layout/layout.ts";
import type { AxisName } from "../layout/mesh.ts";
import { fuzzPlan, type FuzzCase, type FuzzCopy } from "./case.ts";

export const FEATURES = [
  "world >= 8",
  "world 16",
  "pp > 1",
  "ep > 1",
  "cp > 1",
  "dp_replicate > 1",
  "dim sharded by 2+ axes",
  "uneven chunk",
  "empty chunk",
  "Shard on dim > 0",
  "sub-mesh",
  "dense and sparse params in one model",
  "stage without expert params beside one with",
  "stage holding nothing",
  "stage holding only a tied replica",
  "tie group across stages",
  "replica with other placements than its canonical copy",
  "Partial(sum) over an axis of 2+ ranks",
] as const;
export type Feature = (typeof FEATURES)[number];

/** Ranks along `axis` of a stage mesh. */
function axisSize(l: Layout, axis: AxisName): number {
  if (axis === "ep") return l.ep;
  if (axis === "efsdp") return (l.dp_shard * l.cp * l.tp) / l.ep;
  return l[axis as Exclude<AxisName, "ep" | "efsdp">];
}

/** Some dim is split by two or more axes of more than one rank. */
function shardedTwice(c: FuzzCopy, l: Layout): boolean {
  const dims = c.placements.flatMap((p, i) => (p.kind === "shard" && axisSize(l, c.axes[i]!) > 1 ? [p.dim] : []));
  return new Set(dims).size < dims.length;
}

/** The features one case has. */
export function featuresOf(c: FuzzCase): Set<Feature> {
  const f = new Set<Feature>();
  const world = worldSize(c.layout);
  if (world >= 8) f.add("world >= 8");
  if (world === 16) f.add("world 16");
  if (c.layout.pp > 1) f.add("pp > 1");
  if (c.layout.ep > 1) f.add("ep > 1");
  if (c.layout.cp > 1) f.add("cp > 1");
  if (c.layout.dp_replicate > 1) f.add("dp_replicate > 1");
  const copies: FuzzCopy[] = c.params.flatMap((p) => [p, ...p.replicas]);
  if (copies.some((x) => shardedTwice(x, c.layout))) f.add("dim sharded by 2+ axes");
  if (copies.some((x) => x.placements.some((p) => p.kind === "shard" && p.dim > 0))) f.add("Shard on dim > 0");
  if (copies.some((x) => x.axes.length < (x.mesh === "dense" ? 4 : 3))) f.add("sub-mesh");
  if (copies.some((x) => x.mesh === "dense") && copies.some((x) => x.mesh === "sparse")) f.add("dense and sparse params in one model");
  if (c.params.some((p) => p.replicas.length)) f.add("tie group across stages");
  if (c.params.some((p) => p.replicas.some((r) => JSON.stringify([r.mesh, r.axes, r.placements]) !== JSON.stringify([p.mesh, p.axes, p.placements])))) {
    f.add("replica with other placements than its canonical copy");
  }
  const plan = fuzzPlan(c);
  if (plan.some((params) => params.some((p) => (p.partial?.count ?? 1) > 1))) f.add("Partial(sum) over an axis of 2+ ranks");
  for (const params of plan) {
    for (const p of params) {
      const full = p.block.globalShape;
      for (let d = 0; d < full.length; d++) {
        if (p.block.len[d] === 0) f.add("empty chunk");
      }
    }
  }
  // uneven: some copy has two ranks of its stage holding blocks of different element counts (non-empty)
  for (const p of c.params) {
    const sizes = new Set<number>();
    for (const params of plan) for (const q of params) if (q.name === p.name && q.canonical && q.numel > 0) sizes.add(q.numel);
    if (sizes.size > 1) f.add("uneven chunk");
  }
  const stages = Array.from({ length: c.layout.pp }, () => ({ canonical: 0, replicas: 0, sparse: 0 }));
  for (const p of c.params) {
    stages[p.stage]!.canonical++;
    if (p.mesh === "sparse") stages[p.stage]!.sparse++;
    for (const r of p.replicas) {
      stages[r.stage]!.replicas++;
      if (r.mesh === "sparse") stages[r.stage]!.sparse++;
    }
  }
  if (stages.some((s) => s.sparse > 0) && stages.some((s) => s.sparse === 0 && s.canonical + s.replicas > 0)) {
    f.add("stage without expert params beside one with");
  }
  if (stages.some((s) => s.canonical + s.replicas === 0)) f.add("stage holding nothing");
  if (stages.some((s) => s.canonical === 0 && s.replicas > 0)) f.add("stage holding only a tied replica");
  return f;
}

/** How many of `cases` have each feature. */
export function coverage(cases: readonly FuzzCase[]): Record<Feature, number> {
  const out = Object.fromEntries(FEATURES.map((f) => [f, 0])) as Record<Feature, number>;
  for (const c of cases) for (const f of featuresOf(c)) out[f]++;
  return out;
}

/** What an optimizer-owned subject's cases add (arbitraries.ts optimizerCaseArb; suites/fuzz/optimizer.test.ts). */
export const OPTIMIZER_FEATURES = [
  "finalize regime with a tie group across stages",
  "two tied params over one set of stages",
  "tie group not starting on stage 0",
  "training case",
  "training case with a tie group across stages",
] as const;
export type OptimizerFeature = (typeof OPTIMIZER_FEATURES)[number];

/** The optimizer features one case has. */
export function optimizerFeaturesOf(c: FuzzCase): Set<OptimizerFeature> {
  const f = new Set<OptimizerFeature>();
  const tied = c.params.filter((p) => p.replicas.length);
  const stageSets = tied.map((p) => [p.stage, ...p.replicas.map((r) => r.stage)].join(","));
  if (tied.length && c.regime === "finalize") f.add("finalize regime with a tie group across stages");
  if (new Set(stageSets).size < stageSets.length) f.add("two tied params over one set of stages");
  if (tied.some((p) => p.stage > 0)) f.add("tie group not starting on stage 0");
  if (c.steps !== undefined) {
    f.add("training case");
    if (tied.length) f.add("training case with a tie group across stages");
  }
  return f;
}

/** How many of `cases` have each optimizer feature. */
export function optimizerCoverage(cases: readonly FuzzCase[]): Record<OptimizerFeature, number> {
  const out = Object.fromEntries(OPTIMIZER_FEATURES.map((f) => [f, 0])) as Record<OptimizerFeature, number>;
  for (const c of cases) for (const f of optimizerFeaturesOf(c)) out[f]++;
  return out;
}

/**
 * Issue 42: the reference is cached by (model, dtype, norm type, regime, seed, step), and a training run
 * in the boundary regime places each step's max_norm at that step's reference norm. A key that left a
 * field out would hand one cell another's reference; in training, step t would clip with step 1's
 * max_norm on every layout alike, which train.parity (layouts against each other) cannot see.
 */
import { describe, expect, it } from "vitest";
import { parseLayout } from "../../harness/layout/layout.ts";
import { computeReference } from "../../harness/gradients/reference.ts";
import { maxNormOf } from "../../harness/gradients/regimes.ts";
import { fuzzManifest, validateCase, type FuzzCase } from "../../harness/fuzz/case.ts";
import { runFuzzTrain } from "../../harness/fuzz/train.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { defineSubject } from "../../harness/subject/api.ts";

/** pp2: a weight tied as trainers tie it, and an untied one; three training steps in the boundary regime. */
const boundaryTrain: FuzzCase = validateCase({
  subject: "titan-mtp",
  layout: parseLayout("pp2"),
  dtype: "f32",
  normType: 2,
  regime: "boundary",
  seed: 3,
  steps: 3,
  params: [
    { name: "embed", shape: [4, 2], stage: 0, mesh: "dense", axes: [], placements: [], replicas: [{ stage: 1, mesh: "dense", axes: [], placements: [] }] },
    { name: "w", shape: [3], stage: 1, mesh: "dense", axes: [], placements: [], replicas: [] },
  ],
});

describe("the reference's sums", () => {
  const three = fuzzManifest({ ...boundaryTrain, params: [4, 3, 2].map((n, i) => ({ name: `p${i}`, shape: [n], stage: 0, mesh: "dense" as const, axes: [], placements: [], replicas: [] })) });

  it("counts only the parameters the regime gives a gradient (sparse: not every third)", () => {
    expect(computeReference(three, "f32", 2, "active", 0, 0)).toMatchObject({ paramsWithGrad: 3, elementsWithGrad: 9 });
    expect(computeReference(three, "f32", 2, "sparse", 0, 0)).toMatchObject({ paramsWithGrad: 2, elementsWithGrad: 6 });
  });

  it("the inf-norm is the largest magnitude, not a power sum, and NaN when any gradient is NaN", () => {
    const inf = computeReference(three, "f32", Infinity, "active", 0, 0);
    const two = computeReference(three, "f32", 2, "active", 0, 0).totalNorm;
    expect(inf.powerSum).toBe(inf.totalNorm);
    expect(inf.totalNorm).toBeLessThanOrEqual(two);
    expect(inf.totalNorm).toBeGreaterThanOrEqual(two / Math.sqrt(9));
    expect(computeReference(three, "f32", Infinity, "ones", 0, 0).totalNorm).toBe(1);
    expect(computeReference(three, "f32", Infinity, "nonfinite-nan", 0, 0).totalNorm).toBeNaN();
    expect(computeReference(three, "f32", Infinity, "nonfinite-inf", 0, 0).totalNorm).toBe(Infinity);
  });
});

describe("the reference cache key", () => {
  it("tells apart cells that differ in any one of its fields", () => {
    const model = fuzzManifest(boundaryTrain);
    const other = fuzzManifest({ ...boundaryTrain, params: boundaryTrain.params.slice(1) });
    const base = [model, "f32", 2, "active", 0, 1] as const;
    const ref = (...over: Partial<Record<number, unknown>>[]) => {
      const args = [...base] as unknown[];
      for (const o of over) for (const [i, v] of Object.entries(o)) args[Number(i)] = v;
      return computeReference(...(args as Parameters<typeof computeReference>)).powerSum;
    };
    const first = ref();
    for (const change of [{ 0: other }, { 1: "bf16" }, { 2: 1 }, { 3: "ones" }, { 4: 1 }, { 5: 2 }]) {
      expect(ref(change), JSON.stringify(Object.keys(change))).not.toBe(first);
    }
    expect(ref()).toBe(first);
  });

  it("a training run in the boundary regime clips each step at that step's own boundary", async () => {
    const titanMtp = BUILTIN_SUBJECTS["titan-mtp"]!;
    const seen: { maxNorm: number; norm: number }[] = [];
    const recording = defineSubject({
      ...titanMtp,
      async clip(rank, args) {
        const norm = await titanMtp.clip(rank, args);
        if (rank.rank === 0) seen.push({ maxNorm: args.maxNorm, norm });
        return norm;
      },
    });
    const { train, violations } = await runFuzzTrain(boundaryTrain, recording);
    expect(violations).toEqual([]);
    expect(train.check.status).toBe("pass");
    // each step runs the case's layout, then one rank holding the whole model
    expect(seen.length).toBe(2 * boundaryTrain.steps!);
    const model = fuzzManifest(boundaryTrain).name;
    seen.forEach(({ maxNorm, norm }, i) => {
      const step = Math.floor(i / 2) + 1;
      const at = { regime: boundaryTrain.regime, seed: boundaryTrain.seed, model, dtype: boundaryTrain.dtype, normType: boundaryTrain.normType, step };
      expect(maxNorm, `step ${step}`).toBe(maxNormOf(at, norm)); // titan-mtp is exact: its norm is the step's reference norm
    });
    expect(new Set(seen.map((s) => s.maxNorm)).size).toBe(boundaryTrain.steps);
  });
});

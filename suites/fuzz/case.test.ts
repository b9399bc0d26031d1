/**
 * The fuzzer's own machinery: case files, the synthetic plan (blocks tile every tensor; sub-mesh
 * groups), the equivalence of a fuzz case with a built-in model's plan, what the arbitraries cover,
 * and the second shrinking pass.
 */
import { describe, expect, it as vit } from "vitest";
import { fc, it } from "@fast-check/vitest";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { worldSize, parseLayout, validateLayout, type Layout } from "../../harness/layout/layout.ts";
import { coordsOf, denseMesh } from "../../harness/layout/mesh.ts";
import { getModel } from "../../harness/model/models.ts";
import { numel } from "../../harness/model/manifest.ts";
import { planWorld, Replicate, Shard } from "../../harness/model/plan.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { meshesOf, reductionGroup } from "../../harness/world/context.ts";
import { caseArb } from "../../harness/fuzz/arbitraries.ts";
import {
  caseFromFile,
  caseSize,
  caseToFile,
  fuzzManifest,
  fuzzPlan,
  modelName,
  smallerThan,
  validateCase,
  type FuzzCase,
  type FuzzCopy,
  type FuzzParam,
} from "../../harness/fuzz/case.ts";
import { coverage, FEATURES } from "../../harness/fuzz/coverage.ts";
import { minimize } from "../../harness/fuzz/minimize.ts";
import { runFuzzCase } from "../../harness/fuzz/run.ts";

const SEED = 5_050_505;
const cases = caseArb({ subject: "bucketed" });

function axisSize(l: Layout, axis: string): number {
  if (axis === "ep") return l.ep;
  if (axis === "efsdp") return (l.dp_shard * l.cp * l.tp) / l.ep;
  return l[axis as "dp_replicate" | "dp_shard" | "cp" | "tp"];
}

describe("fuzz cases", () => {
  it.prop([cases], { seed: SEED, numRuns: 200 })("round-trip through a replay file", (c) => {
    expect(caseFromFile(caseToFile(c), "test")).toEqual(validateCase(c));
  });

  it.prop([cases], { seed: SEED, numRuns: 200 })(
    "blocks tile every copy: each element is held by stage ranks / (ranks of its sharding axes) ranks",
    (c) => {
      const plan = fuzzPlan(c);
      const dense = denseMesh(validateLayout(c.layout));
      const stageRanks = worldSize(c.layout) / c.layout.pp;
      const check = (p: FuzzParam, copy: FuzzCopy, canonical: boolean) => {
        const held = new Array<number>(numel(p.shape)).fill(0);
        let ranks = 0;
        for (const [rank, params] of plan.entries()) {
          if (coordsOf(dense, rank)[0] !== copy.stage) continue;
          ranks++;
          const local = params.filter((q) => q.name === p.name && q.canonical === canonical);
          expect(local).toHaveLength(1);
          const b = local[0]!.block;
          // every element of the block, as a flat index of the global tensor
          const walk = (d: number, base: number): void => {
            if (d === p.shape.length) {
              held[base]!++;
              return;
            }
            for (let k = 0; k < b.len[d]!; k++) walk(d + 1, base * p.shape[d]! + b.start[d]! + k);
          };
          walk(0, 0);
        }
        expect(ranks).toBe(stageRanks);
        let shards = 1;
        copy.placements.forEach((pl, i) => {
          if (pl.kind === "shard") shards *= axisSize(c.layout, copy.axes[i]!);
        });
        expect(new Set(held)).toEqual(new Set([stageRanks / shards]));
      };
      for (const p of c.params) {
        check(p, p, true);
        for (const r of p.replicas) check(p, r, false);
      }
    },
  );

  vit("a sub-mesh parameter's flags align with its own mesh axes; a mismatched flag list throws", () => {
    const layout = parseLayout("dp_replicate2,dp_shard2,tp2");
    const meshes = meshesOf(layout);
    const p = { mesh: "dense" as const, meshAxes: ["dp_shard", "tp"] as const };
    // rank = dp_replicate*4 + dp_shard*2 + tp: the dp_shard group of rank 0 is {0, 2}
    expect(reductionGroup(meshes, 0, p, [true, false]).ranks).toEqual([0, 2]);
    expect(reductionGroup(meshes, 0, p, [false, true]).ranks).toEqual([0, 1]);
    expect(reductionGroup(meshes, 0, "dense", [false, true, false, false]).ranks).toEqual([0, 2]);
    expect(() => reductionGroup(meshes, 0, "dense", [true, false])).toThrow(/2 flags for the 4 axes.*groupOf\(p, flags\)/);
  });

  vit("refuses malformed cases with the parameter and field named", () => {
    const base: FuzzCase = {
      subject: "bucketed",
      layout: parseLayout("pp2,tp2"),
      dtype: "f32",
      normType: 2,
      regime: "active",
      seed: 0,
      params: [{ name: "w", shape: [4, 3], stage: 0, mesh: "dense", axes: ["tp"], placements: [Shard(0)], replicas: [] }],
    };
    expect(validateCase(base).params).toHaveLength(1);
    const bad = (f: (c: FuzzCase) => void) => {
      const c = structuredClone(base);
      f(c);
      return () => validateCase(c);
    };
    expect(bad((c) => (c.params[0]!.axes = ["tp", "dp_shard"]))).toThrow(/mesh order/);
    expect(bad((c) => (c.params[0]!.axes = ["ep"]))).toThrow(/not an axis of the dense stage mesh/);
    expect(bad((c) => (c.params[0]!.placements = [Shard(2)]))).toThrow(/Shard\(2\) of a tensor of shape \[4, 3\]/);
    expect(bad((c) => (c.params[0]!.stage = 2))).toThrow(/stage 2 is outside 0..1/);
    expect(bad((c) => (c.params[0]!.replicas = [{ stage: 0, mesh: "dense", axes: [], placements: [] }]))).toThrow(/already holds a copy/);
    // Partial(sum) on an untied parameter is a case; on a tied one it is refused, naming the parameter
    expect(validateCase({ ...base, params: [{ ...base.params[0]!, placements: [{ kind: "partial" }] }] }).params[0]!.placements).toEqual([{ kind: "partial" }]);
    const tiedPartial = bad((c) => {
      c.params[0]!.placements = [{ kind: "partial" }];
      c.params[0]!.replicas = [{ stage: 1, mesh: "dense", axes: ["tp"], placements: [Shard(0)] }];
    });
    expect(tiedPartial).toThrow(/fuzz case param 0 \(w\): Partial placement on a tied parameter/);
    expect(() => caseFromFile('{"format":"nope"}', "f.json")).toThrow(/f.json is not a valid fuzz case file/);
  });

  vit("runCell refuses an explicit model or plan that does not match the cell", async () => {
    const c = fc.sample(cases, { seed: SEED, numRuns: 1 })[0]!;
    const subject = BUILTIN_SUBJECTS.bucketed!;
    const cell = { subject: "bucketed", layout: validateLayout(c.layout), model: "not-the-name", dtype: c.dtype, normType: c.normType, regime: c.regime, seed: c.seed };
    await expect(runCell(cell, { subject, model: fuzzManifest(c), plan: fuzzPlan(c) })).rejects.toThrow(/does not name the model given to runCell/);
    const ok = { ...cell, model: modelName(c) };
    await expect(runCell(ok, { subject, model: fuzzManifest(c), plan: [...fuzzPlan(c), []] })).rejects.toThrow(/the plan given to runCell has \d+ ranks; the layout has \d+/);
  });

  vit("a synthetic model's name is content-derived (the reference cache is keyed by it)", () => {
    const c = fc.sample(cases, { seed: SEED, numRuns: 1 })[0]!;
    const d = structuredClone(c);
    d.params[0]!.shape = [...d.params[0]!.shape, 2];
    expect(modelName(c)).toMatch(/^fuzz-[0-9a-f]{12}$/);
    expect(modelName(d)).not.toBe(modelName(c));
    expect(fuzzManifest(c).name).toBe(modelName(c));
    // a Partial gradient's logical value is the sum of its partials: another reference, another name
    const untied = structuredClone(c);
    untied.params[0]!.replicas = [];
    untied.params[0]!.placements = untied.params[0]!.axes.map(() => Replicate);
    const partial = structuredClone(untied);
    partial.params[0]!.placements = partial.params[0]!.placements.map(() => ({ kind: "partial" as const }));
    expect(modelName(partial)).not.toBe(modelName(untied));
    expect(fuzzManifest(partial).params[0]!.partialOver).toEqual(partial.params[0]!.axes);
    expect(caseFromFile(caseToFile(partial), "p.json")).toEqual(validateCase(partial));
  });
});

describe("a fuzz case can state a built-in model's plan, and runs like it", () => {
  for (const [model, spec] of [
    ["llama3-debug", "pp2,dp_shard2,tp2"],
    ["deepseek-v3-debug", "pp2,dp_shard2,ep2"],
  ] as const) {
    vit(`${model} on ${spec}`, async () => {
      const layout = parseLayout(spec);
      const m = getModel(model);
      const plan = planWorld(m, layout);
      const all = plan.flat();
      const c: FuzzCase = {
        subject: "exact",
        layout,
        dtype: "f32",
        normType: 2,
        regime: "active",
        seed: 0,
        params: m.params.map((lp) => {
          const canon = all.find((q) => q.name === lp.name && q.canonical)!;
          const replicas = [...new Map(all.filter((q) => q.name === lp.name && !q.canonical).map((q) => [q.stage, q])).values()];
          const copy = (q: typeof canon): FuzzCopy => ({ stage: q.stage, mesh: q.mesh, axes: q.meshAxes, placements: q.placements });
          return { name: lp.name, shape: lp.shape, ...copy(canon), replicas: replicas.map(copy) };
        }),
      };
      const mine = fuzzPlan(c);
      const strip = (ps: typeof plan[number]) => ps.map((q) => ({ name: q.name, canonical: q.canonical, mesh: q.mesh, axes: q.meshAxes, placements: q.placements, block: q.block }));
      expect(mine.map(strip)).toEqual(plan.map(strip));
      const subject = BUILTIN_SUBJECTS.exact!;
      const builtin = await runCell({ subject: "exact", layout, model, dtype: "f32", normType: 2, regime: "active", seed: 0 }, { subject });
      const fuzzed = await runFuzzCase(c, subject);
      expect(fuzzed.violations).toEqual([]);
      expect(fuzzed.result.totalNorm).toBe(builtin.totalNorm);
      expect(fuzzed.result.referenceNorm).toBe(builtin.referenceNorm);
      expect(fuzzed.result.comm.map((x) => x.calls)).toEqual(builtin.comm.map((x) => x.calls));
    });
  }
});

describe("the arbitraries", () => {
  vit("cover every feature the issue lists in at least 5% of 1000 cases", () => {
    const sample = fc.sample(cases, { seed: SEED, numRuns: 1000 });
    const cov = coverage(sample);
    for (const f of FEATURES) expect(cov[f], f).toBeGreaterThanOrEqual(50);
    for (const c of sample) {
      expect(worldSize(c.layout)).toBeLessThanOrEqual(16);
      for (const p of c.params) expect(numel(p.shape)).toBeLessThanOrEqual(343);
    }
    const norms = new Set(sample.map((c) => c.normType));
    expect(norms).toEqual(new Set([2, 1, Infinity, 1.5]));
    expect(new Set(sample.map((c) => c.dtype))).toEqual(new Set(["f32", "bf16", "f16"]));
    expect(new Set(sample.map((c) => c.regime)).size).toBe(9);
  });
});

describe("the second shrinking pass", () => {
  vit("minimises a case to the smallest one that still fails", async () => {
    const fails = (c: FuzzCase) => c.layout.pp >= 2 && c.params.some((p) => p.replicas.length > 0);
    const start = fc.sample(cases.filter((c) => fails(c) && c.params.length > 2 && worldSize(c.layout) >= 4), { seed: SEED, numRuns: 1 })[0]!;
    const { fuzzCase: min, kept } = await minimize(start, async (c) => fails(c));
    expect(kept).toBeGreaterThan(0);
    expect(smallerThan(caseSize(min), caseSize(start))).toBe(true);
    expect(min.layout).toEqual(parseLayout("pp2"));
    expect(min.params).toHaveLength(1);
    expect(min.params[0]!.shape).toEqual([1]);
    expect(min.params[0]!.replicas).toHaveLength(1);
    expect([min.seed, min.dtype, min.normType, min.regime]).toEqual([0, "f32", 2, "active"]);
    for (const copy of [min.params[0]!, ...min.params[0]!.replicas]) {
      expect(copy.mesh).toBe("dense");
      expect(copy.axes).toHaveLength(1);
      expect(copy.placements).toEqual([Replicate]);
    }
  });
});

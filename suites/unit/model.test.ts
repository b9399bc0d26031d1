import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ModelError } from "../../harness/errors.ts";
import { parseLayout, validateLayout, worldSize, type ValidLayout } from "../../harness/layout/layout.ts";
import { coordsOf, denseMesh, sparseMesh } from "../../harness/layout/mesh.ts";
import { countParams, findParam, ManifestBuilder, numel, type ModelManifest, type TpStyle } from "../../harness/model/manifest.ts";
import { getModel, MODEL_NAMES } from "../../harness/model/models.ts";
import {
  chunkRange,
  localBlock,
  placementsFor,
  planRank,
  planWorld,
  stageLayers,
  stageOfLayer,
  type Block,
  type LocalParam,
} from "../../harness/model/plan.ts";

const shapeOf = (m: ModelManifest, name: string): number[] => findParam(m, name).shape;

describe("model manifests", () => {
  it("lists the built-in models", () => {
    expect(MODEL_NAMES).toEqual(["llama3-debug", "deepseek-v3-debug", "qwen3-0.6b", "llama3-8b", "qwen3-30b-a3b", "deepseek-v3-671b", "llama3-debug-sp", "llama3-debug-unreduced"]);
  });
  it("has the spec totals exactly", () => {
    expect(getModel("qwen3-0.6b").totalParams).toBe(596_049_920);
    expect(getModel("llama3-8b").totalParams).toBe(8_030_261_248);
    expect(getModel("qwen3-30b-a3b").totalParams).toBe(30_532_122_624);
  });
  it("records the debug and 671b totals", () => {
    expect(getModel("llama3-debug").totalParams).toBe(6_163_712);
    const ds = getModel("deepseek-v3-debug");
    expect(ds.totalParams).toBe(38_670_080);
    expect(countParams(ds, (p) => p.kind !== "mtp")).toBe(33_014_016);
    const big = getModel("deepseek-v3-671b");
    const noMtp = countParams(big, (p) => p.kind !== "mtp");
    expect(noMtp).toBe(671_026_404_352);
    expect(big.totalParams).toBe(682_636_465_152);
    expect(noMtp).toBeGreaterThan(670e9);
    expect(noMtp).toBeLessThan(672e9);
    expect(big.totalParams).toBeGreaterThan(680e9);
    expect(big.totalParams).toBeLessThan(686e9);
  });
  it("totalParams is the sum of the params' numel and indices are positions", () => {
    for (const n of MODEL_NAMES) {
      const m = getModel(n);
      expect(m.name).toBe(n);
      expect(m.totalParams).toBe(m.params.reduce((a, p) => a + numel(p.shape), 0));
      m.params.forEach((p, i) => expect(p.index).toBe(i));
      expect(new Set(m.params.map((p) => p.name)).size).toBe(m.params.length);
      for (const p of m.params) {
        if (p.layer !== null) expect(p.name.startsWith(`layers.${p.layer}.`)).toBe(true);
        if (p.tp === "expert") expect(p.shape.length).toBe(3);
      }
      expect(m.description.length).toBeGreaterThan(0);
    }
  });
  it("getModel caches and refuses unknown names", () => {
    expect(getModel("llama3-debug")).toBe(getModel("llama3-debug"));
    let err: unknown;
    try {
      getModel("llama4");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ModelError);
    expect((err as ModelError).code).toBe("E_MODEL");
    expect((err as Error).message).toContain('"llama4"');
    expect((err as Error).message).toContain("llama3-debug, deepseek-v3-debug, qwen3-0.6b");
    expect(() => getModel("toString")).toThrow(ModelError);
  });
  it("llama3-debug shapes and TP styles", () => {
    const m = getModel("llama3-debug");
    expect(m.nLayers).toBe(6);
    expect(m.params.length).toBe(1 + 6 * 9 + 2);
    expect(m.params[0]).toEqual({ index: 0, name: "tok_embeddings.weight", shape: [2048, 256], kind: "embedding", layer: null, tp: "colwise" });
    expect(findParam(m, "layers.3.attention.wq.weight")).toMatchObject({ shape: [256, 256], kind: "attention", layer: 3, tp: "colwise" });
    expect(findParam(m, "layers.3.attention.wo.weight").tp).toBe("rowwise");
    expect(findParam(m, "layers.0.feed_forward.w1.weight")).toMatchObject({ shape: [768, 256], kind: "ffn", tp: "colwise" });
    expect(findParam(m, "layers.0.feed_forward.w2.weight")).toMatchObject({ shape: [256, 768], tp: "rowwise" });
    expect(findParam(m, "layers.5.ffn_norm.weight")).toMatchObject({ shape: [256], kind: "norm", tp: "replicate" });
    expect(findParam(m, "output.weight")).toMatchObject({ shape: [2048, 256], kind: "output", layer: null, tp: "colwise" });
    expect(m.params.at(-2)!.name).toBe("norm.weight");
    expect(m.ties).toEqual([]);
  });
  it("deepseek-v3-debug shapes, MTP and its tie", () => {
    const m = getModel("deepseek-v3-debug");
    expect(shapeOf(m, "layers.0.attention.wq.weight")).toEqual([3072, 256]);
    expect(findParam(m, "layers.0.attention.wkv_a.weight")).toMatchObject({ shape: [576, 256], tp: "replicate" });
    expect(findParam(m, "layers.0.attention.kv_norm.weight")).toMatchObject({ shape: [512], tp: "replicate" });
    expect(findParam(m, "layers.0.attention.wkv_b.weight")).toMatchObject({ shape: [4096, 512], tp: "colwise" });
    expect(findParam(m, "layers.0.attention.wo.weight")).toMatchObject({ shape: [256, 2048], tp: "rowwise" });
    expect(shapeOf(m, "layers.0.feed_forward.w1.weight")).toEqual([1024, 256]);
    expect(() => findParam(m, "layers.1.feed_forward.w1.weight")).toThrow(ModelError);
    expect(() => findParam(m, "layers.0.moe.experts.w1")).toThrow(ModelError);
    expect(findParam(m, "layers.1.moe.router.gate.weight")).toMatchObject({ shape: [8, 256], kind: "router", tp: "replicate" });
    expect(findParam(m, "layers.5.moe.experts.w2")).toMatchObject({ shape: [8, 256, 256], kind: "expert", tp: "expert" });
    expect(findParam(m, "layers.5.moe.shared_experts.w1.weight")).toMatchObject({ shape: [512, 256], kind: "ffn", tp: "colwise" });
    expect(findParam(m, "layers.5.moe.shared_experts.w2.weight")).toMatchObject({ shape: [256, 512], tp: "rowwise" });
    expect(findParam(m, "mtp.0.eh_proj.weight")).toMatchObject({ shape: [256, 512], kind: "mtp", layer: null, tp: "colwise" });
    expect(findParam(m, "mtp.0.enorm.weight")).toMatchObject({ shape: [256], kind: "mtp" });
    expect(findParam(m, "mtp.0.block.moe.experts.w1")).toMatchObject({ shape: [8, 256, 256], kind: "mtp", layer: null, tp: "expert" });
    const mtp = m.params.filter((p) => p.name.startsWith("mtp."));
    expect(mtp.every((p) => p.kind === "mtp" && p.layer === null)).toBe(true);
    expect(mtp.length).toBe(3 + m.params.filter((p) => p.name.startsWith("layers.1.")).length);
    expect(m.ties).toEqual([{ canonical: "tok_embeddings.weight", replicas: [{ fqn: "mtp.0.embed_tokens.weight", stage: "last", tp: "colwise" }] }]);
  });
  it("qwen3 and deepseek-671b shapes", () => {
    const q = getModel("qwen3-0.6b");
    expect(shapeOf(q, "layers.0.attention.wq.weight")).toEqual([2048, 1024]);
    expect(shapeOf(q, "layers.0.attention.wk.weight")).toEqual([1024, 1024]);
    expect(shapeOf(q, "layers.0.attention.wo.weight")).toEqual([1024, 2048]);
    expect(findParam(q, "layers.27.attention.q_norm.weight")).toMatchObject({ shape: [128], tp: "replicate" });
    expect(() => findParam(q, "output.weight")).toThrow(ModelError);
    expect(q.ties).toEqual([{ canonical: "tok_embeddings.weight", replicas: [{ fqn: "output.weight", stage: "last", tp: "colwise" }] }]);
    const a3 = getModel("qwen3-30b-a3b");
    expect(shapeOf(a3, "layers.47.moe.experts.w1")).toEqual([128, 768, 2048]);
    expect(shapeOf(a3, "layers.47.moe.experts.w2")).toEqual([128, 2048, 768]);
    expect(shapeOf(a3, "layers.0.moe.router.gate.weight")).toEqual([128, 2048]);
    const d = getModel("deepseek-v3-671b");
    expect(findParam(d, "layers.0.attention.wq_a.weight")).toMatchObject({ shape: [1536, 7168], tp: "replicate" });
    expect(shapeOf(d, "layers.0.attention.q_norm.weight")).toEqual([1536]);
    expect(findParam(d, "layers.0.attention.wq_b.weight")).toMatchObject({ shape: [24576, 1536], tp: "colwise" });
    expect(shapeOf(d, "layers.2.feed_forward.w2.weight")).toEqual([7168, 18432]);
    expect(shapeOf(d, "layers.3.moe.experts.w1")).toEqual([256, 2048, 7168]);
    expect(shapeOf(d, "mtp.0.eh_proj.weight")).toEqual([7168, 14336]);
    expect(d.params.filter((p) => p.tp === "expert").length).toBe(3 * (58 + 1));
  });
  it("the builder refuses duplicates and bad shapes", () => {
    const b = new ManifestBuilder("x", 1);
    b.add("a", [2, 2], "ffn", 0, "colwise");
    expect(() => b.add("a", [2], "norm", 0, "replicate")).toThrow(/duplicate/);
    expect(() => b.add("b", [0, 2], "ffn", 0, "colwise")).toThrow(/bad shape/);
    expect(() => b.add("c", [2], "ffn", 0, "rowwise")).toThrow(ModelError);
    expect(() => b.add("d", [2, 2], "expert", 0, "expert")).toThrow(ModelError);
    expect(() => b.tie("zz", "y", "colwise")).toThrow(/unknown/);
  });
});

describe("stages", () => {
  it("floor(s*L/pp) rule, consistent with stageLayers", () => {
    for (const [L, pp] of [[6, 1], [6, 2], [6, 4], [6, 8], [61, 8], [28, 3], [1, 5], [48, 7]] as const) {
      const owners: number[] = [];
      for (let s = 0; s < pp; s++) {
        const [a, b] = stageLayers(s, L, pp);
        expect(a).toBe(Math.floor((s * L) / pp));
        expect(b).toBe(Math.floor(((s + 1) * L) / pp));
        for (let i = a; i < b; i++) owners[i] = s;
      }
      for (let i = 0; i < L; i++) expect(stageOfLayer(i, L, pp)).toBe(owners[i]);
    }
    expect(stageLayers(0, 6, 2)).toEqual([0, 3]);
    expect(stageLayers(1, 6, 2)).toEqual([3, 6]);
    expect(stageLayers(2, 61, 8)).toEqual([15, 22]);
    expect(() => stageOfLayer(6, 6, 2)).toThrow(ModelError);
    expect(() => stageLayers(2, 6, 2)).toThrow();
  });
  it("6 layers on pp8: stages 0 and 4 own no layers but still exist", () => {
    expect(stageLayers(0, 6, 8)).toEqual([0, 0]);
    expect(stageLayers(4, 6, 8)).toEqual([3, 3]);
    expect(stageOfLayer(0, 6, 8)).toBe(1);
    expect(stageOfLayer(5, 6, 8)).toBe(7);
    const m = getModel("llama3-debug");
    const w = planWorld(m, parseLayout("pp8"));
    expect(w.length).toBe(8);
    expect(w[0]!.map((p) => p.fqn)).toEqual(["tok_embeddings.weight"]);
    expect(w[4]).toEqual([]);
    expect(w[1]!.every((p) => p.layer === 0)).toBe(true);
    expect(w[7]!.map((p) => p.fqn).slice(-2)).toEqual(["norm.weight", "output.weight"]);
    expect(w.flat().length).toBe(m.params.length);
  });
  it("deepseek-v3-debug on pp2: layers 0-2 | 3-5 + norm, output, mtp and the embedding replica", () => {
    const m = getModel("deepseek-v3-debug");
    const w = planWorld(m, parseLayout("pp2"));
    const s0 = w[0]!;
    const s1 = w[1]!;
    expect(s0[0]!.fqn).toBe("tok_embeddings.weight");
    expect(new Set(s0.filter((p) => p.layer !== null).map((p) => p.layer))).toEqual(new Set([0, 1, 2]));
    expect(new Set(s1.filter((p) => p.layer !== null).map((p) => p.layer))).toEqual(new Set([3, 4, 5]));
    expect(s0.every((p) => p.stage === 0) && s1.every((p) => p.stage === 1)).toBe(true);
    expect(s0.some((p) => p.kind === "mtp")).toBe(false);
    expect(s1.filter((p) => p.kind === "mtp").length).toBe(m.params.filter((p) => p.kind === "mtp").length);
    const last = s1.at(-1)!;
    expect(last).toMatchObject({ fqn: "mtp.0.embed_tokens.weight", name: "tok_embeddings.weight", canonical: false, tieGroup: "tok_embeddings.weight", index: 0, stage: 1 });
    expect(s0[0]).toMatchObject({ canonical: true, tieGroup: "tok_embeddings.weight" });
    // manifest order, replicas after
    const idx = s1.filter((p) => p.canonical).map((p) => p.index);
    expect(idx).toEqual([...idx].sort((a, b) => a - b));
    expect(s1.findIndex((p) => !p.canonical)).toBe(s1.length - 1);
  });
});

describe("tie replicas", () => {
  it("qwen3-0.6b: output.weight replica only when pp > 1, on the last stage", () => {
    const m = getModel("qwen3-0.6b");
    for (const spec of ["single", "tp2", "dp_shard2,tp2"]) {
      for (const ps of planWorld(m, parseLayout(spec))) {
        expect(ps.some((p) => p.fqn === "output.weight")).toBe(false);
        expect(ps.filter((p) => !p.canonical)).toEqual([]);
        expect(ps.find((p) => p.fqn === "tok_embeddings.weight")).toMatchObject({ canonical: true, tieGroup: "tok_embeddings.weight" });
      }
    }
    const l = parseLayout("pp4,tp2");
    const w = planWorld(m, l);
    const d = denseMesh(l);
    w.forEach((ps, r) => {
      const stage = coordsOf(d, r)[0];
      const rep = ps.filter((p) => p.fqn === "output.weight");
      expect(rep.length).toBe(stage === 3 ? 1 : 0);
      if (stage === 3) {
        expect(rep[0]).toMatchObject({ name: "tok_embeddings.weight", canonical: false, tieGroup: "tok_embeddings.weight", stage: 3, index: 0 });
        expect(ps.at(-1)!.fqn).toBe("output.weight");
      }
      expect(ps.some((p) => p.fqn === "tok_embeddings.weight")).toBe(stage === 0);
    });
    // a replica holds the same blocks as the canonical copy (same colwise placement)
    expect(w[7]!.at(-1)!.block).toEqual(w[1]!.find((p) => p.fqn === "tok_embeddings.weight")!.block);
    // the untied and the non-tied params carry no tie group
    expect(w[0]!.filter((p) => p.tieGroup !== null).map((p) => p.fqn)).toEqual(["tok_embeddings.weight"]);
  });
});

describe("chunkRange", () => {
  it("follows torch.chunk, trailing chunks smaller or empty", () => {
    expect([0, 1, 2, 3].map((i) => chunkRange(5, 4, i))).toEqual([[0, 2], [2, 2], [4, 1], [5, 0]]);
    expect([0, 1, 2].map((i) => chunkRange(10, 3, i))).toEqual([[0, 4], [4, 4], [8, 2]]);
    expect([0, 1, 2, 3].map((i) => chunkRange(8, 4, i))).toEqual([[0, 2], [2, 2], [4, 2], [6, 2]]);
    expect([0, 1, 2, 3, 4].map((i) => chunkRange(2, 5, i))).toEqual([[0, 1], [1, 1], [2, 0], [2, 0], [2, 0]]);
    expect(chunkRange(0, 3, 1)).toEqual([0, 0]);
    expect(() => chunkRange(5, 0, 0)).toThrow(ModelError);
    expect(() => chunkRange(5, 2, 2)).toThrow(ModelError);
  });
  it("tiles 0..n contiguously (property)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 1, max: 40 }), (n, k) => {
        let at = 0;
        const c = Math.ceil(n / k);
        for (let i = 0; i < k; i++) {
          const [s, len] = chunkRange(n, k, i);
          expect(len).toBeGreaterThanOrEqual(0);
          expect(len).toBeLessThanOrEqual(c);
          if (len > 0) expect(s).toBe(at);
          at += len;
        }
        expect(at).toBe(n);
      }),
    );
  });
});

describe("placements and blocks", () => {
  const l = parseLayout("dp_replicate2,dp_shard2,cp2,tp2,ep4");
  it("default placements", () => {
    const R = { kind: "replicate" };
    const S = (dim: number) => ({ kind: "shard", dim });
    const dense = ["dp_replicate", "dp_shard", "cp", "tp"];
    expect(placementsFor({ tp: "colwise", shape: [8, 4] }, l)).toEqual({ mesh: "dense", meshAxes: dense, placements: [R, S(0), S(0), S(0)] });
    expect(placementsFor({ tp: "rowwise", shape: [8, 4] }, l)).toEqual({ mesh: "dense", meshAxes: dense, placements: [R, S(0), S(0), S(1)] });
    expect(placementsFor({ tp: "replicate", shape: [8] }, l)).toEqual({ mesh: "dense", meshAxes: dense, placements: [R, S(0), S(0), R] });
    expect(placementsFor({ tp: "expert", shape: [8, 4, 2] }, l)).toEqual({
      mesh: "sparse",
      meshAxes: ["dp_replicate", "efsdp", "ep"],
      placements: [R, S(1), S(0)],
    });
    expect(() => placementsFor({ tp: "rowwise", shape: [8] }, l)).toThrow(ModelError);
    expect(() => placementsFor({ tp: "expert", shape: [8, 4] }, l)).toThrow(ModelError);
    expect(() => placementsFor({ tp: "bogus" as TpStyle, shape: [8] }, l)).toThrow(ModelError);
  });
  it("a dim split by two axes is a chunk of a chunk, outer axis first", () => {
    const axes = ["dp_replicate", "dp_shard", "cp", "tp"] as const;
    const pl = placementsFor({ tp: "rowwise", shape: [10, 4] }, l).placements;
    // dp_shard 3 -> chunks of 10: 4,4,2 ; then cp 2 -> chunk of that chunk
    expect(localBlock([10, 4], [...axes], pl, [1, 3, 2, 2], [0, 1, 1, 1])).toEqual({ globalShape: [10, 4], start: [6, 2], len: [2, 2] });
    expect(localBlock([10, 4], [...axes], pl, [1, 3, 2, 2], [0, 2, 0, 0])).toEqual({ globalShape: [10, 4], start: [8, 0], len: [1, 2] });
    // not the same as one chunk over 6: chunk(10,6)[3] would start at 6 with len 2, [5] would be empty
    expect(localBlock([10, 4], [...axes], pl, [1, 3, 2, 2], [0, 2, 1, 0]).start[0]).toBe(9);
    // colwise: three axes on dim 0; 5 rows over dp_shard 2, cp 2, tp 2: 3,2 -> (2,1),(1,1) -> ...
    const col = placementsFor({ tp: "colwise", shape: [5, 3] }, l).placements;
    const lens = [];
    for (let a = 0; a < 2; a++) for (let b = 0; b < 2; b++) for (let c = 0; c < 2; c++) lens.push(localBlock([5, 3], [...axes], col, [2, 2, 2, 2], [1, a, b, c]).len[0]);
    expect(lens).toEqual([1, 1, 1, 0, 1, 0, 1, 0]);
    expect(() => localBlock([4], [...axes], pl, [1, 2, 2, 2], [0, 0, 0, 0])).toThrow(ModelError);
    expect(() => localBlock([4, 4], [...axes], pl, [1, 2], [0, 0])).toThrow(ModelError);
  });
  it("expert blocks: experts on ep, out dim on efsdp", () => {
    const m = getModel("deepseek-v3-debug");
    const lay = parseLayout("dp_shard2,tp2,ep2"); // efsdp 2
    const w = planWorld(m, lay);
    const sp = sparseMesh(lay);
    for (let r = 0; r < 4; r++) {
      const [, , ef, ep] = coordsOf(sp, r);
      const e = w[r]!.find((p) => p.fqn === "layers.1.moe.experts.w1")!;
      expect(e.mesh).toBe("sparse");
      expect(e.block).toEqual({ globalShape: [8, 256, 256], start: [4 * ep!, 128 * ef!, 0], len: [4, 128, 256] });
      expect(e.numel).toBe(4 * 128 * 256);
    }
  });
});

/** Checks that the copies of every physical tensor tile it exactly once per replica class. */
function checkCoverage(m: ModelManifest, l: ValidLayout, elementwise: boolean, w = planWorld(m, l)): void {
  const d = denseMesh(l);
  const s = sparseMesh(l);
  const byFqn = new Map<string, { rank: number; p: LocalParam }[]>();
  w.forEach((ps, rank) => {
    for (const p of ps) {
      expect(p.stage).toBe(coordsOf(d, rank)[0]);
      const list = byFqn.get(p.fqn) ?? [];
      list.push({ rank, p });
      byFqn.set(p.fqn, list);
    }
  });
  const expectedFqns = m.params.length + (l.pp > 1 ? m.ties.reduce((a, t) => a + t.replicas.length, 0) : 0);
  expect(byFqn.size).toBe(expectedFqns);
  for (const [fqn, copies] of byFqn) {
    const shape = copies[0]!.p.block.globalShape;
    const total = numel(shape);
    expect(copies.length).toBe(worldSize(l) / l.pp); // every rank of its stage
    const classes = new Map<string, Block[]>();
    for (const { rank, p } of copies) {
      const mesh = p.mesh === "dense" ? d : s;
      const c = coordsOf(mesh, rank).slice(1);
      const key = p.placements.map((x, i) => (x.kind === "shard" ? "*" : c[i])).join(",");
      const list = classes.get(key) ?? [];
      list.push(p.block);
      classes.set(key, list);
      expect(p.numel).toBe(numel(p.block.len));
      p.block.start.forEach((st, k) => {
        expect(st).toBeGreaterThanOrEqual(0);
        expect(st + p.block.len[k]!).toBeLessThanOrEqual(shape[k]!);
      });
    }
    for (const blocks of classes.values()) {
      const sum = blocks.reduce((a, b) => a + numel(b.len), 0);
      if (sum !== total) throw new Error(`${fqn}: shards of one replica class sum to ${sum}, not ${total}`);
      if (elementwise) {
        const seen = new Uint8Array(total);
        for (const b of blocks) forEachIndex(b, (i) => seen[i]!++);
        expect(seen.every((x) => x === 1)).toBe(true);
      }
    }
  }
}

function forEachIndex(b: Block, f: (flat: number) => void): void {
  const n = b.globalShape.length;
  if (b.len.some((x) => x === 0)) return;
  const idx = b.start.slice();
  for (;;) {
    let flat = 0;
    for (let k = 0; k < n; k++) flat = flat * b.globalShape[k]! + idx[k]!;
    f(flat);
    let k = n - 1;
    while (k >= 0) {
      idx[k]!++;
      if (idx[k]! < b.start[k]! + b.len[k]!) break;
      idx[k] = b.start[k]!;
      k--;
    }
    if (k < 0) return;
  }
}

describe("shard coverage", () => {
  it("uneven shards cover every tensor exactly once per replica class (debug models)", () => {
    for (const spec of ["single", "pp2,dp_shard2,ep2", "dp_replicate2,dp_shard3,tp2,ep3", "pp3,cp2,tp3,ep6", "dp_shard5,tp3,ep5"]) {
      checkCoverage(getModel("llama3-debug"), parseLayout(spec), false);
      checkCoverage(getModel("deepseek-v3-debug"), parseLayout(spec), false);
    }
  });
  it("element by element on odd shapes (property)", () => {
    const b = new ManifestBuilder("odd", 2);
    b.add("tok_embeddings.weight", [7, 3], "embedding", null, "colwise");
    b.add("layers.0.w", [5, 3], "attention", 0, "rowwise");
    b.add("layers.0.n", [3], "norm", 0, "replicate");
    b.add("layers.1.e", [3, 5, 2], "expert", 1, "expert");
    b.add("layers.1.c", [2, 9], "ffn", 1, "colwise");
    b.add("norm.weight", [1], "norm", null, "replicate");
    b.tie("tok_embeddings.weight", "head.weight", "colwise");
    const m = b.build("odd shapes");
    const size = fc.integer({ min: 1, max: 3 });
    fc.assert(
      fc.property(size, size, size, size, size, fc.nat(10), (pp, dr, ds, cp, tp, k) => {
        const inner = ds * cp * tp;
        const divs = Array.from({ length: inner }, (_, i) => i + 1).filter((x) => inner % x === 0);
        checkCoverage(m, validateLayout({ pp, dp_replicate: dr, dp_shard: ds, cp, tp, ep: divs[k % divs.length]! }), true);
      }),
      { numRuns: 60 },
    );
  });
  it("the coverage check itself catches an overlap", () => {
    const bad = new ManifestBuilder("bad", 1).add("layers.0.w", [4, 4], "ffn", 0, "colwise").build("x");
    const l = parseLayout("tp2");
    expect(() => checkCoverage(bad, l, true)).not.toThrow();
    const w = planWorld(bad, l);
    expect(w[0]![0]!.block.start).toEqual([0, 0]);
    expect(w[1]![0]!.block.start).toEqual([2, 0]);
    // rank 1 claims rank 0's rows: same total numel, but rows 0-1 twice and 2-3 never
    w[1]![0]!.block.start = [0, 0];
    expect(() => checkCoverage(bad, l, true, w)).toThrow();
    // a short shard fails the numel sum
    const w2 = planWorld(bad, l);
    w2[1]![0]!.block.len = [1, 4];
    w2[1]![0]!.numel = 4;
    expect(() => checkCoverage(bad, l, false, w2)).toThrow(/sum to 12, not 16/);
  });
  it("planRank equals planWorld[rank]", () => {
    const m = getModel("deepseek-v3-debug");
    const l = parseLayout("pp2,dp_shard2,tp2,ep2");
    const w = planWorld(m, l);
    for (let r = 0; r < 8; r++) expect(planRank(m, l, r)).toEqual(w[r]);
    expect(() => planRank(m, l, 8)).toThrow();
    expect(() => planRank(m, validateLayout({ ...l, ep: 3 }), 0)).toThrow(/ep\(3\) must divide/);
  });
});

describe("scale", () => {
  it("planWorld for deepseek-v3-671b on pp8,dp_shard4,tp8,ep32 (256 ranks) is fast", () => {
    const m = getModel("deepseek-v3-671b");
    const l = parseLayout("pp8,dp_shard4,tp8,ep32");
    const t0 = performance.now();
    const w = planWorld(m, l);
    const ms = performance.now() - t0;
    expect(w.length).toBe(256);
    expect(ms).toBeLessThan(1500);
    // every logical element counted once over the canonical copies, on replica class 0 (coordinate 0 on
    // every Replicate axis: tp for norms, routers, wq_a, wkv_a)
    const d = denseMesh(l);
    const s = sparseMesh(l);
    let canonical = 0;
    let all = 0;
    w.forEach((ps, r) => {
      const dc = coordsOf(d, r).slice(1);
      const sc = coordsOf(s, r).slice(1);
      for (const p of ps) {
        all += p.numel;
        const c = p.mesh === "dense" ? dc : sc;
        if (p.canonical && p.placements.every((x, i) => x.kind === "shard" || c[i] === 0)) canonical += p.numel;
      }
    });
    expect(canonical).toBe(m.totalParams);
    expect(all).toBeGreaterThan(m.totalParams);
    const e = w[255]!.find((p) => p.fqn === "mtp.0.block.moe.experts.w1")!;
    expect(e.block.len).toEqual([8, 2048, 7168]);
    expect(w[255]!.at(-1)!.fqn).toBe("mtp.0.embed_tokens.weight");
  });
});

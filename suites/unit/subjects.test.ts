/**
 * The built-in subjects, without the native addon: a small in-memory backend (float32 values in
 * Float64Arrays, a byte ledger per rank) stands in for it, the real World and rank contexts run the
 * collectives, and a toy MoE model with uneven shapes, a dense-only first layer and a tied
 * embedding replica exercises every placement. Plus the registry, loadSubject and toBf16.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import type { DType, Exact, Ops, ParamView, Subject, Tensor } from "../../harness/subject/api.ts";
import { clipCoefficient, NonFiniteNormError, normFromPowerSum } from "../../harness/subject/api.ts";
import { reductionGroupOf } from "../../harness/subject/common.ts";
import { toBf16 } from "../../harness/numerics/numerics.ts";
import {
  BUILTIN_SUBJECTS,
  CORRECT_SUBJECTS,
  KNOWN_BAD_SUBJECTS,
  isSubjectPath,
  loadSubject,
  validateSubject,
} from "../../harness/registry/registry.ts";
import { exactAdd, exactToNumber, EXACT_ZERO } from "../../harness/backend/exact.ts";
import type { Backend } from "../../harness/backend/backend.ts";
import { InputError } from "../../harness/errors.ts";
import { validateLayout, type Layout, type ValidLayout } from "../../harness/layout/layout.ts";
import { worldSize } from "../../harness/layout/layout.ts";
import { ManifestBuilder, type ModelManifest } from "../../harness/model/manifest.ts";
import { planWorld } from "../../harness/model/plan.ts";
import { clipArgs, meshesOf, rankContext } from "../../harness/world/context.ts";
import { World } from "../../harness/world/world.ts";
import type { CommRecord } from "../../harness/subject/api.ts";

// ---------------------------------------------------------------------------------------------
// An in-memory backend: enough of Backend for World (catFor) and rankContext (opsFor).

class MockTensor implements Tensor {
  constructor(
    readonly id: number,
    readonly dtype: DType,
    readonly shape: readonly number[],
    readonly rank: number,
    readonly data: Float64Array,
  ) {}
  get numel(): number {
    return this.data.length;
  }
}

/** x as an integer N with x = N * 2^-1074 (x finite, >= 0). */
function scaled(x: number): bigint {
  if (x === 0) return 0n;
  const dv = new DataView(new ArrayBuffer(8));
  dv.setFloat64(0, x);
  const bits = dv.getBigUint64(0);
  const e = Number((bits >> 52n) & 0x7ffn);
  const m = bits & ((1n << 52n) - 1n);
  return e === 0 ? m : (m | (1n << 52n)) << BigInt(e - 1);
}

const f32 = Math.fround;

class MockBackend {
  private nextId = 1;
  readonly live = new Map<number, MockTensor>();
  readonly liveBytes: number[];
  readonly peakBytes: number[];
  constructor(ranks: number) {
    this.liveBytes = new Array(ranks).fill(0);
    this.peakBytes = new Array(ranks).fill(0);
  }
  alloc(rank: number, shape: readonly number[], data?: Float64Array): MockTensor {
    const n = shape.reduce((a, b) => a * b, 1);
    const t = new MockTensor(this.nextId++, "f32", [...shape], rank, data ?? new Float64Array(n));
    this.live.set(t.id, t);
    this.liveBytes[rank] += 4 * n;
    this.peakBytes[rank] = Math.max(this.peakBytes[rank], this.liveBytes[rank]);
    return t;
  }
  free(t: Tensor): void {
    if (!this.live.delete(t.id)) throw new Error(`tensor ${t.id} freed twice`);
    this.liveBytes[t.rank] -= 4 * t.numel;
  }
  resetPeak(): void {
    this.liveBytes.forEach((b, r) => (this.peakBytes[r] = b));
  }
  private get(t: Tensor): MockTensor {
    const m = this.live.get(t.id);
    if (!m) throw new Error(`tensor ${t.id} is not alive`);
    return m;
  }
  catFor(rank: number, ts: readonly Tensor[], dim: number): Tensor {
    const parts = ts.map((t) => this.get(t));
    const shape = [...parts[0].shape];
    shape[dim] = parts.reduce((a, t) => a + t.shape[dim], 0);
    const inner = shape.slice(dim + 1).reduce((a, b) => a * b, 1);
    const outer = shape.slice(0, dim).reduce((a, b) => a * b, 1);
    const out = this.alloc(rank, shape);
    let k = 0;
    for (let o = 0; o < outer; o++) {
      for (const t of parts) {
        const n = t.shape[dim] * inner;
        out.data.set(t.data.subarray(o * n, o * n + n), k);
        k += n;
      }
    }
    return out;
  }
  opsFor(rank: number): Ops {
    const get = (t: Tensor) => this.get(t);
    return {
      sumAbsPow: (t, p) => get(t).data.reduce((a, x) => a + Math.abs(x) ** p, 0),
      exactSumAbsPow: (t, p): Exact => {
        let sum = 0n;
        let nonfinite = 0;
        for (const x of get(t).data) {
          const v = Math.abs(x) ** p;
          if (Number.isFinite(v)) sum += scaled(v);
          else nonfinite += v;
        }
        return { sum, nonfinite };
      },
      maxAbs: (t) => get(t).data.reduce((a, x) => (Number.isNaN(a) || Number.isNaN(x) ? NaN : Math.max(a, Math.abs(x))), 0),
      nonFiniteCount: (t) => get(t).data.filter((x) => !Number.isFinite(x)).length,
      scale_: (t, coef) => {
        const d = get(t).data;
        for (let i = 0; i < d.length; i++) d[i] = f32(f32(d[i]) * f32(coef));
      },
      empty: (_dtype, shape) => this.alloc(rank, shape),
      clone: (t) => this.alloc(rank, t.shape, get(t).data.slice()),
      narrow: (t, dim, start, length) => {
        const src = get(t);
        const inner = src.shape.slice(dim + 1).reduce((a, b) => a * b, 1);
        const outer = src.shape.slice(0, dim).reduce((a, b) => a * b, 1);
        const shape = [...src.shape];
        shape[dim] = length;
        const out = this.alloc(rank, shape);
        for (let o = 0; o < outer; o++) {
          const from = (o * src.shape[dim] + start) * inner;
          out.data.set(src.data.subarray(from, from + length * inner), o * length * inner);
        }
        return out;
      },
      cat: (ts, dim) => this.catFor(rank, ts, dim),
      copy_: (dst, src) => get(dst).data.set(get(src).data),
      free: (t) => this.free(t),
      exactZero: () => EXACT_ZERO,
      exactAdd,
      exactToNumber,
    };
  }
}

// ---------------------------------------------------------------------------------------------
// A toy MoE model: 4 layers (layer 0 dense, 1-3 MoE with 4 experts), odd sizes (uneven shards),
// Replicate-on-tp norms and routers, and an MTP layer with a replica of tok_embeddings.

function toyModel(): ModelManifest {
  const b = new ManifestBuilder("toy-moe", 4);
  b.add("tok_embeddings.weight", [37, 8], "embedding", null, "colwise");
  for (let l = 0; l < 4; l++) {
    b.linear(`layers.${l}.attention.wq`, 12, 8, "attention", l, "colwise");
    b.linear(`layers.${l}.attention.wo`, 8, 12, "attention", l, "rowwise");
    b.norm(`layers.${l}.attention_norm`, 8, l);
    if (l === 0) {
      b.linear(`layers.${l}.feed_forward.w1`, 20, 8, "ffn", l, "colwise");
      b.linear(`layers.${l}.feed_forward.w2`, 8, 20, "ffn", l, "rowwise");
    } else {
      b.linear(`layers.${l}.moe.router.gate`, 4, 8, "router", l, "replicate");
      b.add(`layers.${l}.moe.experts.w1`, [4, 6, 8], "expert", l, "expert");
      b.add(`layers.${l}.moe.experts.w2`, [4, 8, 6], "expert", l, "expert");
    }
  }
  b.norm("norm", 8, null);
  b.linear("output", 37, 8, "output", null, "colwise");
  b.norm("mtp.0.norm", 8, null, "mtp");
  b.tie("tok_embeddings.weight", "mtp.0.embed_tokens.weight", "colwise");
  return b.build("toy MoE for subject unit tests");
}
const TOY = toyModel();

function hash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

interface Regime {
  hasGrad: (index: number) => boolean;
  /** value of element i of param `name` (float32-exact) */
  value: (name: string, i: number) => number;
  /** first logical param with a grad gets this at element 0 */
  special?: number;
}
const gen: Regime["value"] = (name, i) => {
  const h = Math.imul(hash(name) ^ Math.imul(i + 1, 0x9e3779b1), 0x85ebca6b) >>> 0;
  return (((h >>> 16) & 0xffff) - 0x8000) * 2 ** -15; // 16 significant bits: |g|^2 exact, sums exact
};
const REGIMES: Record<string, Regime> = {
  active: { hasGrad: () => true, value: gen },
  sparse: { hasGrad: (i) => i % 3 !== 1, value: gen },
  ones: { hasGrad: () => true, value: () => 1 },
  empty: { hasGrad: () => false, value: gen },
  inf: { hasGrad: () => true, value: gen, special: Infinity },
  nan: { hasGrad: () => true, value: gen, special: NaN },
};

function valueAt(regime: Regime, firstIndex: number, p: { name: string; index: number }, i: number): number {
  if (regime.special !== undefined && p.index === firstIndex && i === 0) return regime.special;
  return regime.value(p.name, i);
}

/** The reference norm on the full logical grads (sums are exact in float64 for these values). */
function referenceNorm(model: ModelManifest, regime: Regime, normType: number): number {
  const first = model.params.find((p) => regime.hasGrad(p.index))?.index ?? -1;
  let s = 0;
  for (const p of model.params) {
    if (!regime.hasGrad(p.index)) continue;
    const n = p.shape.reduce((a, b) => a * b, 1);
    for (let i = 0; i < n; i++) {
      const a = Math.abs(valueAt(regime, first, p, i));
      s = normType === Infinity ? (Number.isNaN(a) || Number.isNaN(s) ? NaN : Math.max(s, a)) : s + a ** normType;
    }
  }
  return normFromPowerSum(s, normType);
}

interface Outcome {
  norms: (number | undefined)[];
  errors: (Error | undefined)[];
  liveness: string | null;
  comm: CommRecord[];
  /** per rank, per param: the original local grad values (null when absent) */
  before: (Float64Array | null)[][];
  views: ParamView[][];
  backend: MockBackend;
  gradBytes: number[];
  scratchPeak: number[];
  leaked: number[];
}

const L = (p: Partial<Layout>): ValidLayout => validateLayout({ pp: 1, dp_replicate: 1, dp_shard: 1, cp: 1, tp: 1, ep: 1, ...p });

async function runMock(
  subject: Subject,
  layout: ValidLayout,
  opts: { regime?: string; normType?: number; maxNorm?: number; errorIfNonfinite?: boolean; model?: ModelManifest } = {},
): Promise<Outcome> {
  const model = opts.model ?? TOY;
  const regime = REGIMES[opts.regime ?? "active"];
  const first = model.params.find((p) => regime.hasGrad(p.index))?.index ?? -1;
  const n = worldSize(layout);
  const backend = new MockBackend(n);
  const plan = planWorld(model, layout);
  const views: ParamView[][] = plan.map((params, rank) =>
    params.map((p) => {
      let grad: Tensor | null = null;
      if (regime.hasGrad(p.index)) {
        const data = new Float64Array(p.numel);
        // element j of the block -> global row-major index
        const { globalShape, start, len } = p.block;
        for (let j = 0; j < p.numel; j++) {
          let rem = j;
          let gi = 0;
          let stride = 1;
          for (let d = len.length - 1; d >= 0; d--) {
            gi += (start[d] + (rem % len[d])) * stride;
            rem = Math.floor(rem / len[d]);
            stride *= globalShape[d];
          }
          data[j] = valueAt(regime, first, p, gi);
        }
        grad = backend.alloc(rank, p.block.len, data);
      }
      return Object.freeze({
        fqn: p.fqn,
        name: p.name,
        canonical: p.canonical,
        tieGroup: p.tieGroup,
        kind: p.kind,
        layer: p.layer,
        stage: p.stage,
        mesh: p.mesh,
        meshAxes: p.meshAxes,
        placements: p.placements,
        globalShape: p.block.globalShape,
        block: p.block,
        grad,
      });
    }),
  );
  const before = views.map((vs) => vs.map((v) => (v.grad ? (v.grad as MockTensor).data.slice() : null)));
  const gradBytes = [...backend.liveBytes];
  backend.resetPeak();
  const world = new World(n, backend as unknown as Backend);
  const meshes = meshesOf(layout);
  const run = await world.run(
    (rank) =>
      subject.clip(rankContext(rank, layout, meshes, world, backend as unknown as Backend), clipArgs(views[rank], { maxNorm: opts.maxNorm ?? 1, normType: opts.normType ?? 2, errorIfNonfinite: opts.errorIfNonfinite ?? false })),
    { timeoutMs: 10_000 },
  );
  return {
    norms: run.ranks.map((o) => o.value),
    errors: run.ranks.map((o) => o.error),
    liveness: run.liveness,
    comm: run.comm,
    before,
    views,
    backend,
    gradBytes,
    scratchPeak: backend.peakBytes.map((p, r) => p - gradBytes[r]),
    leaked: backend.liveBytes.map((b, r) => b - gradBytes[r]),
  };
}

/** The first grad element (on any rank) that is not round(f32(g) * coef(norm)), or null. */
function firstUnscaled(o: Outcome, maxNorm = 1, only?: (v: ParamView) => boolean): string | null {
  for (let r = 0; r < o.views.length; r++) {
    const norm = o.norms[r]!;
    const coef = clipCoefficient(maxNorm, norm);
    for (let i = 0; i < o.views[r].length; i++) {
      const v = o.views[r][i];
      if (!v.grad || (only && !only(v))) continue;
      const got = (v.grad as MockTensor).data;
      const orig = o.before[r][i]!;
      for (let j = 0; j < got.length; j++) {
        const want = f32(f32(orig[j]) * f32(coef));
        if (!Object.is(got[j], want) && !(Number.isNaN(got[j]) && Number.isNaN(want))) {
          return `rank ${r} ${v.fqn}[${j}]: ${got[j]} != ${want}`;
        }
      }
    }
  }
  return null;
}

function withinFp32(norm: number, ref: number): boolean {
  if (Number.isNaN(ref)) return Number.isNaN(norm);
  return Math.abs(norm - ref) <= 4 * 2 ** -24 * ref;
}

/** Distinct reduction groups of the counted params on a rank (the comm budget's count, minus pp). */
function distinctGroups(o: Outcome, layout: ValidLayout, rank: number): number {
  const ctx = rankContext(rank, layout, meshesOf(layout), new World(worldSize(layout)), o.backend as unknown as Backend);
  return new Set(o.views[rank].filter((v) => v.grad && v.canonical).map((v) => reductionGroupOf(ctx, v).key)).size;
}

const LAYOUTS: ValidLayout[] = [
  L({}),
  L({ pp: 2 }),
  L({ pp: 4 }),
  L({ dp_shard: 2 }),
  L({ dp_shard: 3 }),
  L({ dp_shard: 3, ep: 3 }),
  L({ dp_replicate: 2, dp_shard: 2 }),
  L({ dp_replicate: 2, tp: 2, ep: 2 }),
  L({ tp: 2 }),
  L({ cp: 2, tp: 2, ep: 4 }),
  L({ pp: 2, dp_shard: 2, ep: 2 }),
  L({ pp: 2, dp_shard: 2, tp: 2, ep: 4 }),
  L({ pp: 2, dp_replicate: 2, dp_shard: 2, ep: 2 }),
  L({ pp: 4, dp_shard: 2, ep: 2 }),
  L({ dp_shard: 5, ep: 5 }),
];
const fmt = (l: Layout) =>
  Object.entries(l)
    .filter(([, v]) => v > 1)
    .map(([k, v]) => `${k}${v}`)
    .join("_") || "single";

// ---------------------------------------------------------------------------------------------

describe("correct subjects on the mock backend", () => {
  for (const name of CORRECT_SUBJECTS) {
    const subject = BUILTIN_SUBJECTS[name];
    const exactClaim = subject.tolerance === "exact";
    for (const normType of [2, 1, Infinity, 3]) {
      it(`${name} p=${normType}: reference norm, every copy scaled, no leak, consistent collectives`, async () => {
        const ref = referenceNorm(TOY, REGIMES.active, normType);
        for (const layout of LAYOUTS) {
          const o = await runMock(subject, layout, { normType });
          const where = `${name} ${fmt(layout)} p=${normType}`;
          expect(o.liveness, where).toBeNull();
          expect(o.errors.filter(Boolean), where).toEqual([]);
          for (const norm of o.norms) {
            if (exactClaim && normType !== 3) expect(norm, where).toBe(ref);
            else expect(withinFp32(norm!, ref), `${where}: ${norm} vs ${ref}`).toBe(true);
          }
          expect(new Set(o.norms).size, where).toBe(1);
          expect(firstUnscaled(o), where).toBeNull();
          expect(o.leaked, where).toEqual(o.leaked.map(() => 0));
          expect(Math.max(...o.scratchPeak), where).toBe(0);
          for (let r = 0; r < o.comm.length; r++) {
            if (name === "titan") expect(o.comm[r].calls, where).toBe(2);
            else expect(o.comm[r].calls, `${where} rank ${r}`).toBeLessThanOrEqual(distinctGroups(o, layout, r) + 1);
          }
        }
      });
    }

    it(`${name}: sparse, ones and empty regimes`, async () => {
      for (const regime of ["sparse", "ones", "empty"]) {
        const ref = referenceNorm(TOY, REGIMES[regime], 2);
        for (const layout of [L({ pp: 2, dp_shard: 2, tp: 2, ep: 4 }), L({ pp: 4, dp_shard: 2, ep: 2 }), L({ dp_replicate: 2, dp_shard: 3, ep: 3 })]) {
          const o = await runMock(subject, layout, { regime });
          const where = `${name} ${fmt(layout)} ${regime}`;
          expect(o.liveness, where).toBeNull();
          for (const norm of o.norms) expect(withinFp32(norm!, ref), `${where}: ${norm} vs ${ref}`).toBe(true);
          if (regime === "ones") expect(o.norms[0], where).toBe(f32(Math.sqrt(TOY.totalParams)));
          if (regime === "empty") expect(o.norms[0], where).toBe(0);
          expect(firstUnscaled(o), where).toBeNull();
        }
      }
    });

    it(`${name}: non-finite norms raise on every rank when asked, else propagate`, async () => {
      const layout = L({ pp: 2, dp_shard: 2, tp: 2, ep: 2 });
      for (const regime of ["inf", "nan"]) {
        for (const normType of [2, Infinity]) {
          const o = await runMock(subject, layout, { regime, normType, errorIfNonfinite: true });
          const where = `${name} ${regime} p=${normType}`;
          expect(o.liveness, where).toBeNull();
          for (const e of o.errors) expect(e, where).toBeInstanceOf(NonFiniteNormError);
          const p = await runMock(subject, layout, { regime, normType, errorIfNonfinite: false });
          const want = regime === "nan" ? NaN : Infinity;
          for (const norm of p.norms) expect(norm, where).toBe(want);
          expect(firstUnscaled(p), where).toBeNull(); // coef 0 for Inf, NaN for NaN: every grad scaled
        }
      }
    });
  }

  it("exact subjects are bitwise layout-independent even when float sums are not", async () => {
    // values whose float64 sum depends on order: huge and tiny magnitudes
    const b = new ManifestBuilder("ill-conditioned", 2);
    b.add("a.weight", [16, 4], "ffn", 0, "colwise");
    b.add("b.weight", [9, 4], "ffn", 1, "colwise");
    const model = b.build("ill-conditioned");
    const vals = (name: string, i: number) => (i % 7 === 0 ? 2 ** 20 : 1 + 2 ** -22) * (name.startsWith("a") ? 1 : -1);
    REGIMES.ill = { hasGrad: () => true, value: vals };
    let s = 0n;
    for (const p of model.params) for (let i = 0; i < p.shape[0] * p.shape[1]; i++) s += scaled(vals(p.name, i) ** 2);
    const ref = normFromPowerSum(exactToNumber({ sum: s, nonfinite: 0 }), 2);
    for (const name of ["reference", "exact"]) {
      for (const layout of [L({}), L({ pp: 2, dp_shard: 3 }), L({ dp_shard: 2, tp: 2 }), L({ dp_shard: 7 })]) {
        const o = await runMock(BUILTIN_SUBJECTS[name], layout, { model, regime: "ill" });
        for (const norm of o.norms) expect(norm, `${name} ${fmt(layout)}`).toBe(ref);
      }
    }
  });
});

describe("known-bad subjects on the mock backend", () => {
  const PP_TIED = L({ pp: 2, dp_shard: 2, tp: 2, ep: 2 });

  async function normOf(name: string, layout: ValidLayout, opts: Parameters<typeof runMock>[2] = {}) {
    const o = await runMock(BUILTIN_SUBJECTS[name], layout, opts);
    expect(o.liveness).toBeNull();
    expect(o.leaked).toEqual(o.leaked.map(() => 0));
    return { o, norm: o.norms[0]!, ref: referenceNorm(TOY, REGIMES[opts.regime ?? "active"], opts.normType ?? 2) };
  }

  it("every known-bad subject declares catchBy and a bug-specific docstring name", () => {
    for (const name of KNOWN_BAD_SUBJECTS) {
      const s = BUILTIN_SUBJECTS[name];
      expect(s.catchBy?.length, name).toBeGreaterThan(0);
      expect(s.description.length, name).toBeGreaterThan(0);
    }
  });

  it("no-pp-reduce: right on pp=1, wrong norm on pp>1", async () => {
    expect(withinFp32((await normOf("no-pp-reduce", L({ dp_shard: 2 }))).norm, referenceNorm(TOY, REGIMES.active, 2))).toBe(true);
    const { norm, ref } = await normOf("no-pp-reduce", PP_TIED);
    expect(withinFp32(norm, ref)).toBe(false);
  });

  it("replica-twice: the tied replica adds its norm on pp>1 (ones: 28.28 vs 40 style)", async () => {
    const { norm, ref } = await normOf("replica-twice", PP_TIED, { regime: "ones" });
    expect(ref).toBe(f32(Math.sqrt(TOY.totalParams)));
    expect(norm).toBe(f32(Math.sqrt(TOY.totalParams + 37 * 8)));
  });

  it("replica-unscaled: right norm, the replica is left unscaled", async () => {
    const { o, norm, ref } = await normOf("replica-unscaled", PP_TIED);
    expect(withinFp32(norm, ref)).toBe(true);
    expect(firstUnscaled(o, 1, (v) => v.canonical)).toBeNull();
    expect(firstUnscaled(o, 1, (v) => !v.canonical)).toMatch(/mtp\.0\.embed_tokens/);
  });

  it("tp-replicate-summed: right on tp=1, Replicate-on-tp grads counted tp times", async () => {
    expect(withinFp32((await normOf("tp-replicate-summed", L({ dp_shard: 2, pp: 2 }))).norm, referenceNorm(TOY, REGIMES.active, 2))).toBe(true);
    const { norm, ref } = await normOf("tp-replicate-summed", L({ tp: 2 }), { regime: "ones" });
    const replicateOnTp = TOY.params.filter((p) => p.tp === "replicate").reduce((a, p) => a + p.shape.reduce((x, y) => x * y, 1), 0);
    expect(ref).toBe(f32(Math.sqrt(TOY.totalParams)));
    expect(norm).toBe(f32(Math.sqrt(TOY.totalParams + replicateOnTp)));
  });

  it("inf-as-sum: right for p=2, sums the maxima for p=inf", async () => {
    expect(withinFp32((await normOf("inf-as-sum", PP_TIED)).norm, referenceNorm(TOY, REGIMES.active, 2))).toBe(true);
    const { norm, ref } = await normOf("inf-as-sum", PP_TIED, { normType: Infinity });
    expect(norm).toBeGreaterThan(ref);
  });

  it("unbucketed: right norm, more collectives than groups + 1", async () => {
    const { o, norm, ref } = await normOf("unbucketed", PP_TIED);
    expect(withinFp32(norm, ref)).toBe(true);
    expect(firstUnscaled(o)).toBeNull();
    expect(o.comm[0].calls).toBeGreaterThan(distinctGroups(o, PP_TIED, 0) + 1);
  });

  it("ep-skip-empty: right where every stage has experts, hangs where stage 0 has none", async () => {
    for (const layout of [L({ pp: 2, dp_shard: 2, ep: 2 }), L({ dp_shard: 2, ep: 2 })]) {
      const { o, norm, ref } = await normOf("ep-skip-empty", layout);
      expect(withinFp32(norm, ref)).toBe(true);
      expect(firstUnscaled(o)).toBeNull();
    }
    const o = await runMock(BUILTIN_SUBJECTS["ep-skip-empty"], L({ pp: 4, dp_shard: 2, ep: 2 }));
    expect(o.liveness).toMatch(/hang/);
  });

  it("padding-counted: right with even shards, counts padding with uneven ones", async () => {
    const even = L({ pp: 2 });
    expect(withinFp32((await normOf("padding-counted", even)).norm, referenceNorm(TOY, REGIMES.active, 2))).toBe(true);
    const { norm, ref } = await normOf("padding-counted", L({ dp_shard: 3, ep: 3 }));
    expect(norm).toBeGreaterThan(ref);
  });

  it("bf16-norm: a bfloat16 norm, outside the fp32 tolerance", async () => {
    const { o, norm, ref } = await normOf("bf16-norm", PP_TIED);
    expect(norm).toBe(toBf16(norm));
    expect(withinFp32(norm, ref)).toBe(false);
    expect(Math.abs(norm - ref) / ref).toBeLessThan(2 ** -6);
    expect(firstUnscaled(o)).toBeNull();
  });

  it("hf-replicate: right norm, grads unscaled, scratch about the full model", async () => {
    for (const layout of [L({}), PP_TIED, L({ dp_shard: 3, cp: 2, ep: 2 })]) {
      const { o, norm, ref } = await normOf("hf-replicate", layout);
      expect(withinFp32(norm, ref), fmt(layout)).toBe(true);
      // nothing of p.grad was scaled
      for (let r = 0; r < o.views.length; r++) {
        o.views[r].forEach((v, i) => v.grad && expect((v.grad as MockTensor).data).toEqual(o.before[r][i]));
      }
      // every rank holds a full copy of every grad of its stage at once
      for (let r = 0; r < o.views.length; r++) {
        const full = o.views[r].reduce((a, v) => a + (v.grad ? 4 * v.globalShape.reduce((x, y) => x * y, 1) : 0), 0);
        expect(o.scratchPeak[r], `${fmt(layout)} rank ${r}`).toBeGreaterThanOrEqual(full);
      }
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe("toBf16", () => {
  it("rounds to nearest, ties to even, like PyTorch's float -> bfloat16", () => {
    expect(toBf16(1)).toBe(1);
    expect(toBf16(1 + 2 ** -8)).toBe(1); // tie, down to even
    expect(toBf16(1 + 3 * 2 ** -8)).toBe(1 + 2 ** -6); // tie, up to even
    expect(toBf16(1 + 2 ** -8 + 2 ** -20)).toBe(1 + 2 ** -7); // above the tie
    expect(toBf16(1 + 2 ** -9)).toBe(1);
    expect(toBf16(-3.14159)).toBe(-3.140625);
    expect(toBf16(256.5)).toBe(256);
    expect(toBf16(257)).toBe(256); // tie at 8 significant bits -> even
    expect(toBf16(259)).toBe(260);
    expect(toBf16(0)).toBe(0);
    expect(Object.is(toBf16(-0), -0)).toBe(true);
    expect(toBf16(Infinity)).toBe(Infinity);
    expect(toBf16(-Infinity)).toBe(-Infinity);
    expect(toBf16(NaN)).toBeNaN();
    expect(toBf16(3.4028234663852886e38)).toBe(Infinity); // float32 max rounds past bf16 max
    expect(toBf16(3.3895313892515355e38)).toBe(3.3895313892515355e38); // bf16 max
    expect(toBf16(2 ** -133)).toBe(2 ** -133); // smallest bf16 subnormal
    expect(toBf16(1e-45)).toBe(0);
  });
  it("is idempotent and keeps 8 significant bits", () => {
    for (let i = 0; i < 2000; i++) {
      const x = (Math.sin(i) * 10 ** ((i % 40) - 20)) / 3;
      const y = toBf16(x);
      expect(toBf16(y)).toBe(y);
      expect(Math.abs(y - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -8);
    }
  });
});

describe("registry", () => {
  it("lists the built-in subjects", () => {
    expect(CORRECT_SUBJECTS).toEqual(["reference", "bucketed", "titan", "exact"]);
    expect(KNOWN_BAD_SUBJECTS).toEqual([
      "hf-replicate",
      "no-pp-reduce",
      "replica-twice",
      "replica-unscaled",
      "tp-replicate-summed",
      "inf-as-sum",
      "unbucketed",
      "ep-skip-empty",
      "padding-counted",
      "bf16-norm",
      "eps-per-rank",
    ]);
    for (const [name, s] of Object.entries(BUILTIN_SUBJECTS)) {
      expect(s.name).toBe(name);
      const record = validateSubject(s, name);
      expect([record.name, record.tolerance, record.catchBy, record.shape]).toEqual([s.name, s.tolerance, s.catchBy, s.shape]);
    }
    expect(BUILTIN_SUBJECTS.reference.tolerance).toBe("exact");
    expect(BUILTIN_SUBJECTS.exact.tolerance).toBe("exact");
  });

  it("tells paths from names", () => {
    for (const p of ["./a", "../b/c", "/abs/x", "my.ts", "x.js", "y.mjs", ".\\win"]) expect(isSubjectPath(p), p).toBe(true);
    for (const n of ["bucketed", "hf-replicate", "torch.ts.thing"]) expect(isSubjectPath(n), n).toBe(false);
  });

  it("loads built-ins by name and refuses unknown names listing the built-ins", async () => {
    expect(await loadSubject("titan")).toBe(BUILTIN_SUBJECTS.titan);
    const err = await loadSubject("buckted").catch((e) => e);
    expect(err).toBeInstanceOf(InputError);
    expect(err.message).toContain('"buckted"');
    for (const n of [...CORRECT_SUBJECTS, ...KNOWN_BAD_SUBJECTS]) expect(err.message).toContain(n);
    await expect(loadSubject("toString")).rejects.toBeInstanceOf(InputError);
    await expect(loadSubject("")).rejects.toBeInstanceOf(InputError);
  });

  it("sends torch:module:function to the PyTorch adapter, which refuses a module it cannot import", async () => {
    // With torch installed: the module does not import; without: run `npm run setup:torch`. Exit 2 either way.
    const err = await loadSubject("torch:my_pkg.clip:clip_grad_norm_").catch((e: Error) => e);
    expect(err).toBeInstanceOf(InputError);
    expect((err as Error).message).toMatch(/my_pkg.*cannot be imported|npm run setup:torch/);
    await expect(loadSubject("torch:not a spec")).rejects.toThrow(/torch:<module>:<function>/);
  }, 60_000);

  it("validates a subject's fields, naming field and value", () => {
    const where = "subject module ./x.ts";
    const clip = async () => 0;
    expect(() => validateSubject(null, where)).toThrow(InputError);
    expect(() => validateSubject(42, where)).toThrow(/x\.ts: a subject must be an object.*got 42/);
    expect(() => validateSubject({ clip }, where)).toThrow(/field "name" must be a non-empty string; got undefined/);
    expect(() => validateSubject({ name: 7, clip }, where)).toThrow(/field "name".*got 7/);
    expect(() => validateSubject({ name: "x", clip: "no" }, where)).toThrow(/field "clip" must be a function.*got "no"/);
    expect(() => validateSubject({ name: "x", clip, tolerance: "fp64" }, where)).toThrow(/field "tolerance" must be one of exact, fp32, fp32-accum, bf16; got "fp64"/);
    expect(() => validateSubject({ name: "x", clip, catchBy: "parity.norm" }, where)).toThrow(/field "catchBy"/);
    const ok = validateSubject({ name: "x", clip }, where);
    expect(ok.name).toBe("x");
    expect(ok.description).toBe("");
  });

  it("reads a subject once into a frozen record: a field that is a getter is refused (issue 55)", async () => {
    const where = "subject module ./x.ts";
    let reads = 0;
    // undefined when the registry checks it, a function when the cell would call it
    const sly = { name: "sly", clip: async () => 0, get external() {
      return reads++ === 0 ? undefined : async () => ({});
    } };
    expect(() => validateSubject(sly, where)).toThrow(/x\.ts: field "external" is a getter; a subject's fields must be plain values \(each is read once\)/);
    const catchBy = ["parity.norm"];
    const r = validateSubject({ name: "x", clip: async () => 0, catchBy }, where);
    catchBy.push("comm.budget");
    expect(r.catchBy).toEqual(["parity.norm"]);
    expect(Object.isFrozen(r) && Object.isFrozen(r.catchBy)).toBe(true);
    class Clipper {
      name = "cls";
      scale = 3;
      async clip() {
        return this.scale;
      }
    }
    await expect(validateSubject(new Clipper(), where).clip({} as never, {} as never)).resolves.toBe(3);
  });

  describe("user modules", () => {
    let dir: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), "clip-parity-subject-"));
      writeFileSync(
        join(dir, "mine.ts"),
        `import { defineSubject } from ${JSON.stringify(join(process.cwd(), "harness/subject/api.ts"))};
         const n: number = 41;
         export default defineSubject({ name: "mine", description: "d", tolerance: "bf16", async clip() { return n + 1; } });\n`,
      );
      writeFileSync(join(dir, "named.mjs"), `export const subject = { name: "named", clip: async () => 1 };\n`);
      writeFileSync(join(dir, "bad.mjs"), `export default { name: "bad", clip: async () => 1, tolerance: "fp16" };\n`);
      writeFileSync(join(dir, "none.mjs"), `export const other = 1;\n`);
      writeFileSync(join(dir, "broken.mjs"), `export default {\n`);
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it("loads a .ts default export by absolute and relative path", async () => {
      const abs = await loadSubject(join(dir, "mine.ts"));
      expect(abs.name).toBe("mine");
      expect(abs.tolerance).toBe("bf16");
      expect(await abs.clip(undefined as never, undefined as never)).toBe(42);
      const rel = relative(process.cwd(), join(dir, "mine.ts"));
      expect((await loadSubject(rel.startsWith(".") ? rel : `./${rel}`)).name).toBe("mine");
    });

    it("loads an export named subject", async () => {
      expect((await loadSubject(join(dir, "named.mjs"))).name).toBe("named");
    });

    it("refuses bad, empty, missing and broken modules with the path in the message", async () => {
      await expect(loadSubject(join(dir, "bad.mjs"))).rejects.toThrow(/bad\.mjs: field "tolerance".*"fp16"/);
      await expect(loadSubject(join(dir, "none.mjs"))).rejects.toThrow(/none\.mjs: it has no default export.*other/);
      const missing = await loadSubject(join(dir, "missing.ts")).catch((e) => e);
      expect(missing).toBeInstanceOf(InputError);
      expect(missing.message).toContain("missing.ts");
      const broken = await loadSubject(join(dir, "broken.mjs")).catch((e) => e);
      expect(broken).toBeInstanceOf(InputError);
      expect(broken.message).toContain("broken.mjs");
    });
  });
});

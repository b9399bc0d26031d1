/**
 * The finalize regime (SPEC §5) and the optimizer-owned clipper shape (issue 15): the generator's
 * sums, the tensor collectives, every correct subject and `titan-mtp` passing every check of the
 * finalize matrix, and each optimizer-owned known-bad subject caught by its own check; the train
 * section (suites/train.test.ts) catches the one no clip cell can.
 */
import { describe, expect, it } from "vitest";
import { Backend } from "../harness/backend/backend.ts";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS, OPTIMIZER_KNOWN_BAD_SUBJECTS, OPTIMIZER_SUBJECTS } from "../harness/registry/registry.ts";
import { ALL_REGIMES, REGIMES, regimeSpec } from "../harness/gradients/regimes.ts";
import { gradSpecs, heldCopies, tieCopies } from "../harness/gradients/specs.ts";
import { clipCoefficient, normFromPowerSum, type Subject } from "../harness/subject/api.ts";
import { exactPowerSum, scaleAll } from "../harness/subject/common.ts";
import { finalizeTied } from "../harness/subject/optimizer.ts";
import { computeReference } from "../harness/gradients/reference.ts";
import { getModel } from "../harness/model/models.ts";
import { planWorld } from "../harness/model/plan.ts";
import { parseLayout } from "../harness/layout/layout.ts";
import { World } from "../harness/world/world.ts";
import { meshesOf, rankContext } from "../harness/world/context.ts";
import { builtinMatrices } from "../matrix/index.ts";
import { finalizeMatrix } from "../matrix/finalize.ts";
import { runMatrix } from "../harness/run/runner.ts";
import { runCell } from "../harness/execute/cell.ts";
import { cellId } from "../harness/cell/cell.ts";

const DSV3 = getModel("deepseek-v3-debug");
const EMB = "tok_embeddings.weight";
const MTP = "mtp.0.embed_tokens.weight";
const full = (shape: number[]) => ({ globalShape: shape, start: shape.map(() => 0), len: shape });

describe("finalize: generator", () => {
  it("keeps the sweep's regimes as they were and adds finalize beside them (the cpu matrix holds the finalize section's cells)", () => {
    expect(REGIMES).not.toContain("finalize");
    expect(ALL_REGIMES).toContain("finalize");
    const matrices = builtinMatrices();
    for (const m of Object.values(matrices)) if (m.name !== "cpu") expect(m.cases.some((c) => c.regime === "finalize"), m.name).toBe(false);
    expect(matrices.cpu!.cases.filter((c) => c.regime === "finalize").map((c) => cellId({ subject: "", ...c }))).toEqual(finalizeMatrix().cases.map((c) => cellId({ subject: "", ...c })));
    expect(regimeSpec("finalize").tiedExp).toBe(-1);
  });

  it("names the copies canonical first and gives a pp=1 tensor both partials", () => {
    expect(tieCopies(DSV3, EMB)).toEqual([EMB, MTP]);
    expect(tieCopies(DSV3, "norm.weight")).toEqual([]);
    const lp = { fqn: EMB, name: EMB, canonical: true, stage: 0 };
    expect(heldCopies(DSV3, 1, lp)).toEqual([EMB, MTP]);
    expect(heldCopies(DSV3, 2, lp)).toEqual([EMB]);
    expect(heldCopies(DSV3, 2, { fqn: MTP, name: EMB, canonical: false, stage: 1 })).toEqual([MTP]);
  });

  for (const dtype of ["f32", "bf16"] as const) {
    it(`the logical gradient is the f32 sum of the copies' partials, rounded once (${dtype})`, () => {
      const b = new Backend("cpu", 1);
      const shape = [16, 8];
      const specs = gradSpecs(DSV3, { dtype, regime: "finalize", seed: 3, step: 2, pp: 2, shape: "optimizer" });
      const logical = specs.logical({ name: EMB, index: 0 });
      expect(logical.sumOf).toEqual([EMB, MTP]);
      expect(logical.exp).toBe(-1);
      const [sum, a, c] = [logical, specs.input({ fqn: EMB, name: EMB, index: 0, canonical: true, stage: 0 }), specs.input({ fqn: MTP, name: EMB, index: 0, canonical: false, stage: 1 })].map((g) => {
        const t = b.alloc(0, dtype, shape);
        b.fillGrad(t, g, full(shape));
        return t;
      });
      const f = new Float32Array(1);
      let differs = 0;
      for (let i = 0; i < 128; i++) {
        const x = b.getElement(a!, i);
        const y = b.getElement(c!, i);
        if (x !== y) differs++;
        f[0] = Math.fround(x + y);
        const want = dtype === "f32" ? f[0] : Number(new Float32Array([toBf16(f[0])])[0]);
        expect(b.getElement(sum!, i), `element ${i}`).toBe(want);
        expect(Math.abs(x)).toBeLessThan(0.5); // e = -1
      }
      expect(differs).toBeGreaterThan(100); // the copies' partials differ
      // the tensor all_reduce's sum is that sum, bitwise
      b.sumTensors(a!, [a!, c!]);
      expect(b.compare(a!, sum!)).toBeNull();
      b.freeAll();
    });
  }

  it("the reference is taken over the summed gradient", () => {
    const fin = computeReference(DSV3, "f32", 2, "finalize", 0, 0);
    const act = computeReference(DSV3, "f32", 2, "active", 0, 0);
    expect(fin.totalNorm).not.toBe(act.totalNorm);
    expect(fin.paramsWithGrad).toBe(act.paramsWithGrad);
  });
});

/** Rounds to bfloat16 (nearest even). */
function toBf16(x: number): number {
  const u = new Uint32Array(new Float32Array([x]).buffer);
  u[0] = ((u[0]! + 0x7fff + ((u[0]! >>> 16) & 1)) & 0xffff0000) >>> 0;
  return new Float32Array(u.buffer)[0]!;
}

describe("finalize: tensor collectives and tie groups", () => {
  it("allReduceTensor sums in rank order, broadcastTensor copies, both counted; tieGroupOf spans the copies' stages", async () => {
    const layout = parseLayout("pp2,dp_shard2");
    const plan = planWorld(DSV3, layout);
    const b = new Backend("cpu", 4);
    const world = new World(4, b);
    const meshes = meshesOf(layout);
    const ts = [0, 1, 2, 3].map((r) => {
      const t = b.alloc(r, "bf16", [3]);
      b.fillValue(t, [1, 5, 2 ** -9, 7][r]!);
      return t;
    });
    const groups: string[] = [];
    const run = await world.run(async (rank) => {
      const ctx = rankContext(rank, layout, meshes, world, b, plan);
      const tied = plan[rank]!.find((p) => p.tieGroup)!;
      const g = ctx.tieGroupOf({ ...tied, globalShape: tied.block.globalShape, grad: null });
      groups[rank] = g.ranks.join(",");
      if (rank % 2 === 0) await ctx.allReduceTensor(ctx.group("pp"), ts[rank]!, "sum");
      else await ctx.broadcastTensor(ctx.group("pp"), ts[rank]!, 1);
      return 0;
    });
    expect(run.liveness).toBeNull();
    expect(groups).toEqual(["0,2", "1,3", "0,2", "1,3"]);
    // 1 + 2^-9 in f32, rounded once to bf16: 1 (ties to even), on both members
    expect(b.getElement(ts[0]!, 0)).toBe(1);
    expect(b.getElement(ts[2]!, 2)).toBe(1);
    expect(b.getElement(ts[3]!, 1)).toBe(5); // from rank 1
    expect(run.comm[0]!.byKind.all_reduce.calls).toBe(1);
    expect(run.comm[0]!.byKind.all_reduce.bytes).toBe(6);
    expect(run.comm[1]!.byKind.broadcast.calls).toBe(1);
    b.freeAll();
  });

  it("a tensor all_reduce of mismatched shapes is a collective mismatch, not a crash", async () => {
    const layout = parseLayout("pp2");
    const b = new Backend("cpu", 2);
    const world = new World(2, b);
    const ts = [b.alloc(0, "f32", [3]), b.alloc(1, "f32", [4])];
    const run = await world.run((rank) => rankContext(rank, layout, meshesOf(layout), world, b).allReduceTensor(rankContext(rank, layout, meshesOf(layout), world, b).group("pp"), ts[rank]!, "sum"));
    expect(run.liveness).toMatch(/collective mismatch/);
    b.freeAll();
  });
});

describe("finalize: subjects on single cells", () => {
  const cell = (subject: string, layout: string) => ({ subject, layout: parseLayout(layout), model: "deepseek-v3-debug", dtype: "f32" as const, normType: 2, regime: "finalize" as const, seed: 0 });
  const failed = async (subject: string, layout: string) =>
    (await runCell(cell(subject, layout), { subject: BUILTIN_SUBJECTS[subject]! })).checks.filter((c) => c.status === "fail").map((c) => c.id);

  it("titan-mtp finalizes with one collective per tie group within comm.budget", async () => {
    const r = await runCell(cell("titan-mtp", "pp2,dp_shard2,ep2"), { subject: BUILTIN_SUBJECTS["titan-mtp"]! });
    expect(r.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(r.checks.find((c) => c.id === "comm.budget")!.status).toBe("pass");
    expect(r.totalNorm).toBe(r.referenceNorm);
  });

  it("an optimizer-shaped subject that does nothing with the partials is caught: its gradients are not the logical ones", async () => {
    const lazy = { ...BUILTIN_SUBJECTS.exact!, name: "lazy", shape: "optimizer" as const };
    const r = await runCell(cell("lazy", "pp4"), { subject: lazy });
    const bad = r.checks.filter((c) => c.status === "fail").map((c) => c.id);
    expect(bad).toContain("parity.norm");
    expect(bad).toContain("scaling.replicas");
  });

  for (const finalizes of [true, false]) {
    it(`scaling.nonempty finds tied copies left unscaled, ${finalizes ? "finalized (the logical gradient)" : "never finalized (the raw partial)"}`, async () => {
      const skipsTied: Subject = {
        ...BUILTIN_SUBJECTS["titan-mtp"]!,
        name: "skips-tied",
        async clip(rank, args) {
          if (finalizes) await finalizeTied(rank, args.params);
          const { total } = await exactPowerSum(rank, args.logical, args.normType);
          const norm = normFromPowerSum(total, args.normType);
          scaleAll(rank, args.params.filter((p) => !p.tieGroup), clipCoefficient(args.maxNorm, norm));
          return norm;
        },
      };
      const r = await runCell(cell("skips-tied", "pp2"), { subject: skipsTied });
      const check = r.checks.find((c) => c.id === "scaling.nonempty")!;
      expect(check.status).toBe("fail");
      expect(check.message).toMatch(/(tok_embeddings|mtp\.0\.embed_tokens)\.weight: the gradient was not scaled/);
    });
  }

  it("with pp = 1 the copies are one tensor: forgetting the finalize changes nothing", async () => {
    expect(await failed("finalize-forgotten", "single")).toEqual([]);
    expect(await failed("finalize-forgotten", "pp2")).toContain("parity.norm");
  });

  it("titan-mtp passes outside finalize too (a split replica then holds a zero partial)", { timeout: 120_000 }, async () => {
    for (const regime of ["active", "sparse", "ones", "nonfinite-nan", "boundary", "empty"] as const) {
      for (const layout of ["pp2,dp_shard2,ep2", "single"]) {
        const r = await runCell({ ...cell("titan-mtp", layout), regime, dtype: "bf16" }, { subject: BUILTIN_SUBJECTS["titan-mtp"]! });
        expect(r.checks.filter((c) => c.status === "fail").map((c) => `${regime} ${layout} ${c.id}: ${c.message}`)).toEqual([]);
      }
    }
  });

  it("init-unsynced passes every clip check: only training can catch it", async () => {
    expect(await failed("init-unsynced", "pp2,dp_shard2,ep2")).toEqual([]);
  });
});

describe("finalize matrix", () => {
  const matrix = finalizeMatrix();

  it("every correct subject and titan-mtp pass every check on every cell", { timeout: 600_000 }, async () => {
    const out = await runMatrix(matrix, { golden: "off" });
    expect(out.results.length).toBe(matrix.cases.length * (CORRECT_SUBJECTS.length + OPTIMIZER_SUBJECTS.length));
    const failures = out.results.flatMap((r) => r.checks.filter((c) => c.status === "fail").map((c) => `${r.id} ${c.id}: ${c.message}`));
    expect(failures).toEqual([]);
  });

  for (const name of OPTIMIZER_KNOWN_BAD_SUBJECTS) {
    const targets = (BUILTIN_SUBJECTS[name]!.catchBy ?? []).filter((id) => id !== "train.parity");
    if (targets.length === 0) continue; // caught by the train section only (suites/train.test.ts)
    it(`${name} is caught by ${targets.join(" and ")}`, { timeout: 600_000 }, async () => {
      const missing = new Set(targets);
      await runMatrix(matrix, {
        subjects: [name],
        golden: "off",
        stopWhen: (r) => {
          for (const c of r.checks) if (c.status === "fail") missing.delete(c.id);
          return missing.size === 0;
        },
      });
      expect([...missing]).toEqual([]);
    });
  }

  it("keeps the optimizer-owned subjects out of the clip matrices' subject lists", () => {
    for (const n of [...OPTIMIZER_SUBJECTS, ...OPTIMIZER_KNOWN_BAD_SUBJECTS]) {
      expect(CORRECT_SUBJECTS).not.toContain(n);
      expect(KNOWN_BAD_SUBJECTS).not.toContain(n);
      expect(BUILTIN_SUBJECTS[n]!.shape).toBe("optimizer");
    }
  });
});

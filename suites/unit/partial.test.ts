/**
 * Partial(sum) gradients (issue 22): where they are placed, what each rank holds, that the partials
 * add up to the logical gradient bitwise (so the reference is layout-independent), and what the checks
 * expect of a clipped Partial copy (its own partial, scaled) and of its collectives.
 */
import { describe, expect, it } from "vitest";
import { Backend } from "../../harness/backend/backend.ts";
import { defineSubject, type DType } from "../../harness/subject/api.ts";
import { needsPartialSum } from "../../harness/subject/common.ts";
import { gradSpecs } from "../../harness/gradients/specs.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { ModelError } from "../../harness/errors.ts";
import { parseLayout, worldSize } from "../../harness/layout/layout.ts";
import { ManifestBuilder } from "../../harness/model/manifest.ts";
import { getModel } from "../../harness/model/models.ts";
import { planWorld, type LocalParam } from "../../harness/model/plan.ts";
import { runCell } from "../../harness/execute/cell.ts";
import type { Cell } from "../../harness/cell/cell.ts";

const copiesOf = (model: string, layout: string, name: string): LocalParam[] =>
  planWorld(getModel(model), parseLayout(layout)).map((ps) => ps.find((p) => p.name === name)!);

describe("placement", () => {
  it("llama3-debug-sp: norm weights Partial over tp, each tp rank one partial; other params as in llama3-debug", () => {
    const norms = copiesOf("llama3-debug-sp", "dp_shard2,tp2", "layers.0.attention_norm.weight");
    expect(norms.map((p) => p.placements.map((x) => x.kind))).toEqual(Array(4).fill(["replicate", "shard", "shard", "partial"]));
    expect(norms.map((p) => p.partial)).toEqual([0, 1, 0, 1].map((index) => ({ index, count: 2 })));
    expect(norms.map((p) => p.block.len)).toEqual([[128], [128], [128], [128]]); // Partial keeps the block; dp_shard splits it
    const wq = copiesOf("llama3-debug-sp", "dp_shard2,tp2", "layers.0.attention.wq.weight");
    expect(wq).toEqual(copiesOf("llama3-debug", "dp_shard2,tp2", "layers.0.attention.wq.weight"));
  });

  it("llama3-debug-unreduced: every gradient Partial over dp_replicate; one rank there holds the whole (count 1)", () => {
    expect(copiesOf("llama3-debug-unreduced", "dp_replicate2,tp2", "output.weight").map((p) => p.partial)).toEqual([
      { index: 0, count: 2 },
      { index: 0, count: 2 },
      { index: 1, count: 2 },
      { index: 1, count: 2 },
    ]);
    expect(copiesOf("llama3-debug-unreduced", "pp2", "output.weight")[1]!.partial).toEqual({ index: 0, count: 1 });
  });

  it("a tied parameter cannot be Partial", () => {
    const b = new ManifestBuilder("tied-partial", 1).add("emb.weight", [4, 2], "embedding", null, "colwise").tie("emb.weight", "out.weight", "colwise");
    expect(() => b.partialOver(() => true, ["tp"]).build("x")).toThrow(ModelError);
    expect(() => b.build("x")).toThrow(/emb\.weight is tied and cannot be Partial over tp/);
  });
});

describe("the partials add up to the logical gradient bitwise, on any number of ranks", () => {
  for (const [layout, dtype] of [["tp2", "f32"], ["tp4", "bf16"], ["tp3", "f16"], ["pp2,tp2", "f32"]] as [string, DType][]) {
    it(`llama3-debug-sp norm.weight on ${layout}, ${dtype}: the float32 sum of every rank's partial, rounded once, is the logical gradient`, () => {
      const model = getModel("llama3-debug-sp");
      const l = parseLayout(layout);
      const specs = gradSpecs(model, { dtype, regime: "active", seed: 7, step: 0, pp: l.pp });
      const copies = planWorld(model, l).flatMap((ps) => ps.filter((p) => p.name === "norm.weight"));
      expect(copies).toHaveLength(l.tp);
      const backend = new Backend("cpu", worldSize(l));
      try {
        const parts = copies.map((p) => {
          const t = backend.alloc(0, dtype, p.block.len);
          backend.fillGrad(t, specs.held(p), p.block);
          return t;
        });
        const sum = backend.alloc(0, dtype, copies[0]!.block.len);
        backend.sumTensors(sum, parts);
        expect(backend.verifyScaled(sum, specs.logical(copies[0]!), copies[0]!.block, 1)).toBeNull();
        // each partial differs from the logical gradient (index 0 and 1 hold halves, any further index zeros)
        expect(backend.verifyScaled(parts[0]!, specs.logical(copies[0]!), copies[0]!.block, 1)).not.toBeNull();
        if (l.tp > 2) expect(backend.opsFor(0).maxAbs(parts[2]!)).toBe(0);
      } finally {
        backend.freeAll();
      }
    });
  }
});

describe("the reference and the checks on Partial gradients", () => {
  const cell = (over: Partial<Cell>): Cell => ({ subject: "x", layout: parseLayout("dp_replicate2"), model: "llama3-debug-unreduced", dtype: "f32", normType: 2, regime: "active", seed: 0, ...over });

  it("the reference norm does not depend on the layout: the same on one rank (the whole gradient) and on two (two partials)", async () => {
    const exact = BUILTIN_SUBJECTS.exact!;
    const one = await runCell(cell({ layout: parseLayout("single") }), { subject: exact });
    const two = await runCell(cell({}), { subject: exact });
    expect(two.referenceNorm).toBe(one.referenceNorm);
    expect([one.totalNorm, two.totalNorm]).toEqual([one.referenceNorm, one.referenceNorm]);
    expect([...one.checks, ...two.checks].filter((c) => c.status === "fail")).toEqual([]);
  });

  it("parity.tensors: a clipped Partial copy must hold its own partial scaled, not the clipped logical gradient", async () => {
    const bucketed = BUILTIN_SUBJECTS.bucketed!;
    // right norm, but each Partial copy overwritten with the summed gradient before the scaling
    const materialises = defineSubject({
      ...bucketed,
      name: "writes-the-sum",
      async clip(rank, args) {
        for (const p of args.params) if (p.grad && p.placements.some((x) => x.kind === "partial")) await rank.allReduceTensor(rank.groupOf(p, p.placements.map((x) => x.kind === "partial")), p.grad, "sum");
        return bucketed.clip(rank, { ...args, params: args.params.map((p) => ({ ...p, placements: p.placements.map((x) => (x.kind === "partial" ? { kind: "replicate" as const } : x)) })) });
      },
    });
    const r = await runCell(cell({}), { subject: materialises });
    expect(r.checks.find((c) => c.id === "parity.norm")!.status).toBe("pass");
    const t = r.checks.find((c) => c.id === "parity.tensors")!;
    expect(t.status).toBe("fail");
    expect(t.message).toMatch(/rank 0, tok_embeddings\.weight, element \d+: got .* expected .* = round\(g \* /);
  });

  it("comm.budget allows one all_reduce per Partial gradient summed, and no more", async () => {
    const titan = BUILTIN_SUBJECTS.titan!;
    const r = await runCell(cell({ layout: parseLayout("dp_replicate2,tp2") }), { subject: titan });
    const params = getModel("llama3-debug-unreduced").params.length;
    expect(r.comm.map((c) => c.calls)).toEqual(Array(4).fill(params + 2)); // one sum per parameter, the stage, pp
    expect(r.checks.find((c) => c.id === "comm.budget")!.status).toBe("pass");
    const extra = defineSubject({
      ...titan,
      name: "one-more",
      async clip(rank, args) {
        await rank.barrier(rank.group("tp"));
        await rank.barrier(rank.group("tp"));
        return titan.clip(rank, args);
      },
    });
    const over = (await runCell(cell({ layout: parseLayout("dp_replicate2,tp2") }), { subject: extra })).checks.find((c) => c.id === "comm.budget")!;
    expect(over.status).toBe("fail");
    // the tp group, no PP reduction at pp = 1 (SPEC §10's "+ 1 (PP)" is for a pipeline), one sum per Partial gradient
    expect(over.message).toMatch(new RegExp(`budget ${params + 1} = 1 distinct reduction group \\(\\{[\\d,]+\\} \\(tp\\)\\) \\+ ${params} Partial gradients \\(summed over the Partial axes\\);`));
  });
});

describe("needsPartialSum", () => {
  // a rank whose groups span two ranks along every flagged axis: only the placements decide
  const rank = { groupOf: (_p: unknown, flags: readonly boolean[]) => ({ ranks: flags.some(Boolean) ? [0, 1] : [0] }) } as unknown as Parameters<typeof needsPartialSum>[0];
  const param = (...kinds: string[]) => ({ placements: kinds.map((kind) => ({ kind })) }) as unknown as Parameters<typeof needsPartialSum>[1];

  it("is true for a Partial axis of several ranks, alone on its mesh or beside others, and false without one", () => {
    expect(needsPartialSum(rank, param("partial"))).toBe(true);
    expect(needsPartialSum(rank, param("shard", "partial"))).toBe(true);
    expect(needsPartialSum(rank, param("shard", "replicate"))).toBe(false);
  });
});

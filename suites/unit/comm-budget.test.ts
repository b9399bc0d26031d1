/**
 * comm.budget for an optimizer-owned clipper counts one finalize collective per tied parameter (SPEC §5),
 * not one per set of ranks: two tied parameters over the same ranks are two collectives. The debug models
 * have one tie group each, so no matrix cell shows the difference; this model has two.
 */
import { describe, expect, it } from "vitest";
import commBudget from "../../harness/checks/comm-budget.ts";
import type { CheckContext } from "../../harness/checks/types.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { ManifestBuilder } from "../../harness/model/manifest.ts";
import { planWorld } from "../../harness/model/plan.ts";
import { getModel } from "../../harness/model/models.ts";
import type { CommRecord } from "../../harness/subject/api.ts";

const model = new ManifestBuilder("two-ties", 2)
  .add("tok_embeddings.weight", [16, 8], "embedding", null, "colwise")
  .add("pos_embeddings.weight", [16, 8], "embedding", null, "colwise")
  .linear("layers.0.w", 8, 8, "ffn", 0, "colwise")
  .linear("layers.1.w", 8, 8, "ffn", 1, "colwise")
  .tie("tok_embeddings.weight", "mtp.0.tok_embeddings.weight", "colwise")
  .tie("pos_embeddings.weight", "mtp.0.pos_embeddings.weight", "colwise")
  .build("two tied parameters whose copies live on the same two stages");

function comm(calls: number): CommRecord {
  const k = () => ({ calls: 0, bytes: 0 });
  return { calls, bytes: 0, byKind: { all_reduce: { calls, bytes: 0 }, all_gather: k(), broadcast: k(), barrier: k() }, byGroup: {} };
}

function judge(
  callsPerRank: number | number[],
  opts: {
    shape?: "clip" | "optimizer";
    budgets?: { collectives?: number };
    of?: typeof model;
    record?: (calls: number) => CommRecord;
    layout?: string;
    hasGrad?: (p: { name: string }) => boolean;
  } = {},
) {
  const layout = parseLayout(opts.layout ?? "pp2");
  const plan = planWorld(opts.of ?? model, layout);
  const record = opts.record ?? comm;
  const calls = (rank: number) => (typeof callsPerRank === "number" ? callsPerRank : callsPerRank[rank]!);
  const grads = plan.map((ps) => ps.map((p) => (opts.hasGrad === undefined || opts.hasGrad(p) ? {} : null)));
  const ctx = { cell: { layout }, plan, grads, subject: { shape: opts.shape ?? "optimizer" }, budgets: opts.budgets ?? {}, comm: plan.map((_, r) => record(calls(r))) } as unknown as CheckContext;
  return commBudget.judge(ctx);
}

const oneTie = new ManifestBuilder("one-tie", 2)
  .add("tok_embeddings.weight", [16, 8], "embedding", null, "colwise")
  .linear("layers.0.w", 8, 8, "ffn", 0, "colwise")
  .linear("layers.1.w", 8, 8, "ffn", 1, "colwise")
  .tie("tok_embeddings.weight", "mtp.0.tok_embeddings.weight", "colwise")
  .build("one tied parameter");

describe("comm.budget: finalize collectives", () => {
  it("the plan holds two tied parameters over the same two ranks", () => {
    const plan = planWorld(model, parseLayout("pp2"));
    expect(plan[1]!.filter((p) => p.tieGroup && !p.canonical).map((p) => p.name).sort()).toEqual(["pos_embeddings.weight", "tok_embeddings.weight"]);
  });

  it("pp2 of one rank per stage: no reduction group within a stage + 1 (the PP reduction) + 2 tied parameters: 3 collectives pass, 4 fail", () => {
    expect(judge(3).status, judge(3).message).toBe("pass");
    const over = judge(4);
    expect(over.status).toBe("fail");
    expect(over.message).toMatch(/budget 3 = 0 distinct reduction groups \+ 1 \(the PP reduction\) \+ 2 tied parameters \(finalize\)/);
  });
});

describe("comm.budget: the budget and what its messages say", () => {
  it("a clip-shaped subject gets no finalize collectives: 1 passes, 2 fail, each kind counted in the message", () => {
    const ok = judge(1, { shape: "clip" });
    expect([ok.status, ok.message]).toEqual(["pass", "at most 1 collectives across ranks per rank"]);
    const mixed = (calls: number): CommRecord => {
      const k = (n: number) => ({ calls: n, bytes: 0 });
      return { calls, bytes: 0, byKind: { all_reduce: k(calls - 1), all_gather: k(0), broadcast: k(1), barrier: k(0) }, byGroup: {} };
    };
    const over = judge(2, { shape: "clip", record: mixed });
    expect([over.status, over.message]).toEqual([
      "fail",
      "rank 0 issued 2 collectives (1 all_reduce, 1 broadcast) in one clip; budget 1 = 0 distinct reduction groups + 1 (the PP reduction); fused: one over the pipeline stages",
    ]);
  });

  it("one tied parameter is named in the singular", () => {
    expect(judge(2, { of: oneTie }).status).toBe("pass");
    expect(judge(3, { of: oneTie }).message).toMatch(/budget 2 = 0 distinct reduction groups \+ 1 \(the PP reduction\) \+ 1 tied parameter \(finalize\);/);
  });

  it("a matrix's budget replaces the default", () => {
    expect(judge(7, { budgets: { collectives: 7 } }).status).toBe("pass");
    expect(judge(8, { budgets: { collectives: 7 } }).message).toMatch(/^rank 0 issued 8 collectives \(8 all_reduce\) in one clip; budget 7 = the matrix's budget$/);
  });
});

describe("comm.budget: what a tie group and a Partial gradient add", () => {
  it("a tie group within one rank (one stage) needs no finalize collective", () => {
    // one rank, one stage: nothing to reduce with anyone, and no PP reduction at pp = 1
    expect(judge(0, { layout: "single" }).status).toBe("pass");
    expect(judge(1, { layout: "single" }).message).toMatch(/budget 0 = 0 distinct reduction groups; fused: no collective over other ranks$/);
  });

  it("each Partial(sum) gradient over several ranks adds one collective, named in the message", () => {
    const sp = getModel("llama3-debug-sp");
    const plan = planWorld(sp, parseLayout("tp2"));
    const partials = plan[0]!.filter((p) => p.canonical && p.placements.some((x) => x.kind === "partial")).length;
    expect(partials).toBeGreaterThan(1);
    const budget = judge(0, { of: sp, layout: "tp2", shape: "clip" });
    expect(budget.status).toBe("pass");
    const over = judge(100, { of: sp, layout: "tp2", shape: "clip" });
    expect(over.message).toMatch(new RegExp(`budget ${1 + partials} = 1 distinct reduction group \\(\\{0,1\\} \\(tp\\)\\) \\+ ${partials} Partial gradients \\(summed over the Partial axes\\);`));
  });

  it("one Partial gradient is named in the singular, and a Partial parameter without a gradient adds nothing", () => {
    const sp = getModel("llama3-debug-sp");
    const plan = planWorld(sp, parseLayout("tp2"));
    const first = plan[0]!.find((p) => p.canonical && p.placements.some((x) => x.kind === "partial"))!;
    const onlyFirst = (p: { name: string }) => p.name === first.name || !sp.params.find((q) => q.name === p.name)?.partialOver?.length;
    const over = judge(100, { of: sp, layout: "tp2", shape: "clip", hasGrad: onlyFirst });
    expect(over.message).toMatch(/\(tp\)\) \+ 1 Partial gradient \(summed over the Partial axes\);/);
    const none = judge(100, { of: sp, layout: "tp2", shape: "clip", hasGrad: (p) => !sp.params.find((q) => q.name === p.name)?.partialOver?.length });
    expect(none.message).toMatch(/budget 1 = 1 distinct reduction group \(\{0,1\} \(tp\)\); fused: one all_reduce over \{0,1\} \(tp\)$/);
  });

  it("a pass says the most collectives any rank issued", () => {
    expect(judge([0, 1], { shape: "clip" }).message).toBe("at most 1 collectives across ranks per rank");
  });
});

describe("comm.budget: when it can fail (the coverage planner's rule)", () => {
  const facts = (world: number) => ({ world, paramsWithGrad: 3, referenceFinite: true, clipCoef: 0.5, errorIfNonfinite: false, tiedReplica: false });
  it("only with more than one rank: a single rank issues no collective to count", () => {
    expect(commBudget.canFail(facts(1))).toBe(false);
    expect(commBudget.canFail(facts(2))).toBe(true);
  });
});

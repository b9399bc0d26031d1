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

  it("one reduction group + 1 (pp) + 2 tied parameters: 4 collectives pass, 5 fail", () => {
    expect(judge(4).status, judge(4).message).toBe("pass");
    const over = judge(5);
    expect(over.status).toBe("fail");
    expect(over.message).toMatch(/budget 4 = 1 distinct reduction groups \+ 1 \(pp\) \+ 2 tied parameters \(finalize\)/);
  });
});

describe("comm.budget: the budget and what its messages say", () => {
  it("a clip-shaped subject gets no finalize collectives: 2 pass, 3 fail, each kind counted in the message", () => {
    const ok = judge(2, { shape: "clip" });
    expect([ok.status, ok.message]).toEqual(["pass", "at most 2 collectives per rank"]);
    const mixed = (calls: number): CommRecord => {
      const k = (n: number) => ({ calls: n, bytes: 0 });
      return { calls, bytes: 0, byKind: { all_reduce: k(calls - 1), all_gather: k(0), broadcast: k(1), barrier: k(0) }, byGroup: {} };
    };
    const over = judge(3, { shape: "clip", record: mixed });
    expect([over.status, over.message]).toEqual(["fail", "rank 0 issued 3 collectives (2 all_reduce, 1 broadcast) in one clip; budget 2 = 1 distinct reduction groups + 1 (pp)"]);
  });

  it("one tied parameter is named in the singular", () => {
    expect(judge(3, { of: oneTie }).status).toBe("pass");
    expect(judge(4, { of: oneTie }).message).toMatch(/budget 3 = 1 distinct reduction groups \+ 1 \(pp\) \+ 1 tied parameter \(finalize\)$/);
  });

  it("a matrix's budget replaces the default", () => {
    expect(judge(7, { budgets: { collectives: 7 } }).status).toBe("pass");
    expect(judge(8, { budgets: { collectives: 7 } }).message).toMatch(/^rank 0 issued 8 collectives \(8 all_reduce\) in one clip; budget 7 = the matrix's budget$/);
  });
});

describe("comm.budget: what a tie group and a Partial gradient add", () => {
  it("a tie group within one rank (one stage) needs no finalize collective", () => {
    expect(judge(2, { layout: "single" }).status).toBe("pass");
    expect(judge(3, { layout: "single" }).message).toMatch(/budget 2 = 1 distinct reduction groups \+ 1 \(pp\)$/);
  });

  it("each Partial(sum) gradient over several ranks adds one collective, named in the message", () => {
    const sp = getModel("llama3-debug-sp");
    const plan = planWorld(sp, parseLayout("tp2"));
    const partials = plan[0]!.filter((p) => p.canonical && p.placements.some((x) => x.kind === "partial")).length;
    expect(partials).toBeGreaterThan(1);
    const budget = judge(0, { of: sp, layout: "tp2", shape: "clip" });
    expect(budget.status).toBe("pass");
    const over = judge(100, { of: sp, layout: "tp2", shape: "clip" });
    expect(over.message).toMatch(new RegExp(`\\+ 1 \\(pp\\) \\+ ${partials} Partial gradients \\(summed over the Partial axes\\)$`));
  });

  it("one Partial gradient is named in the singular, and a Partial parameter without a gradient adds nothing", () => {
    const sp = getModel("llama3-debug-sp");
    const plan = planWorld(sp, parseLayout("tp2"));
    const first = plan[0]!.find((p) => p.canonical && p.placements.some((x) => x.kind === "partial"))!;
    const onlyFirst = (p: { name: string }) => p.name === first.name || !sp.params.find((q) => q.name === p.name)?.partialOver?.length;
    const over = judge(100, { of: sp, layout: "tp2", shape: "clip", hasGrad: onlyFirst });
    expect(over.message).toMatch(/\+ 1 \(pp\) \+ 1 Partial gradient \(summed over the Partial axes\)$/);
    const none = judge(100, { of: sp, layout: "tp2", shape: "clip", hasGrad: (p) => !sp.params.find((q) => q.name === p.name)?.partialOver?.length });
    expect(none.message).toMatch(/\+ 1 \(pp\)$/);
  });

  it("a pass says the most collectives any rank issued", () => {
    expect(judge([1, 2], { shape: "clip" }).message).toBe("at most 2 collectives per rank");
  });
});

describe("comm.budget: when it can fail (the coverage planner's rule)", () => {
  const facts = (world: number) => ({ world, paramsWithGrad: 3, referenceFinite: true, clipCoef: 0.5, errorIfNonfinite: false, tiedReplica: false });
  it("only with more than one rank: a single rank issues no collective to count", () => {
    expect(commBudget.canFail(facts(1))).toBe(false);
    expect(commBudget.canFail(facts(2))).toBe(true);
  });
});

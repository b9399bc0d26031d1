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
import type { CommRecord } from "../../harness/world/world.ts";

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

function judge(callsPerRank: number) {
  const layout = parseLayout("pp2");
  const plan = planWorld(model, layout);
  const ctx = { cell: { layout }, plan, subject: { shape: "optimizer" }, budgets: {}, comm: plan.map(() => comm(callsPerRank)) } as unknown as CheckContext;
  return commBudget.judge(ctx);
}

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

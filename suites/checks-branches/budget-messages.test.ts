/**
 * What comm.budget and errors.raised say (surviving mutants of the scoped Stryker run, docs/strength.md): the
 * budget's terms and the groups they name, the collectives by kind and by group (local ones marked as not
 * counted), the fused alternative; which ranks raised and what. The first line of each message is pinned (the
 * runner adds the reproduce line).
 */
import { describe, expect, it } from "vitest";
import { runCell, type RunCellOptions } from "../../harness/execute/cell.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { defineSubject } from "../../harness/subject/api.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import type { Cell } from "../../harness/cell/cell.ts";
import { fuzzCell, fuzzManifest, fuzzPlan, validateCase } from "../../harness/fuzz/case.ts";
import { raisesAfterCollectivesOnRank1, raisesAtOnce, testCell } from "./subjects.ts";

const bucketed = BUILTIN_SUBJECTS.bucketed!;
const titanMtp = BUILTIN_SUBJECTS["titan-mtp"]!;
/** `s`, then one barrier over its `group` axis: one collective more. */
const barrierAfter = (s: typeof bucketed, group: string) =>
  defineSubject({
    ...s,
    clip: async (rank, args) => {
      const norm = await s.clip(rank, args);
      await rank.barrier(rank.group(group as never));
      return norm;
    },
  });

async function said(id: string, subject: RunCellOptions["subject"], over: Partial<Cell> = {}, options: Partial<RunCellOptions> = {}) {
  const r = await runCell(testCell(over), { subject, ...options });
  const c = r.checks.find((x) => x.id === id)!;
  return { status: c.status, line: c.message.split("\n")[0] };
}

describe("comm.budget says what was counted and what would do", () => {
  it("groups with their axes, + 1 for the PP reduction, and the fused alternative", async () => {
    expect(await said("comm.budget", barrierAfter(bucketed, "pp"), { layout: parseLayout("pp2,dp_shard2") })).toEqual({
      status: "fail",
      line:
        "rank 0 issued 3 collectives (2 all_reduce, 1 barrier; 1 over {0,1}, 2 over {0,2}) in one clip; budget 2 = 1 distinct reduction group " +
        "({0,1} (dp_shard)) + 1 (the PP reduction); fused: one all_reduce over {0,1} (dp_shard), one over the pipeline stages",
    });
  });

  it("Partial gradients' sums, and local collectives recorded but not counted", async () => {
    expect(await said("comm.budget", barrierAfter(bucketed, "tp"), { layout: parseLayout("tp2"), model: "llama3-debug-sp" })).toEqual({
      status: "fail",
      line:
        "rank 0 issued 17 collectives, 15 of them across ranks (16 all_reduce, 1 barrier; 2 over {0} (local: not counted), 15 over {0,1}) in one clip; " +
        "budget 14 = 1 distinct reduction group ({0,1} (tp)) + 13 Partial gradients (summed over the Partial axes); fused: one all_reduce over {0,1} (tp)",
    });
  });

  it("an optimizer-owned clipper's finalized tie", async () => {
    const c = validateCase({
      subject: "titan-mtp",
      layout: parseLayout("pp2"),
      dtype: "f32",
      normType: 2,
      regime: "active",
      seed: 0,
      params: [{ name: "embed", shape: [4], stage: 0, mesh: "dense", axes: [], placements: [], replicas: [{ stage: 1, mesh: "dense", axes: [], placements: [] }] }],
    });
    const r = await runCell(fuzzCell(c), { subject: barrierAfter(titanMtp, "pp"), model: fuzzManifest(c), plan: fuzzPlan(c) });
    expect(r.checks.find((x) => x.id === "comm.budget")!.message.split("\n")[0]).toMatch(
      /^rank 0 issued 4 collectives, 3 of them across ranks \(3 all_reduce, 1 barrier; 1 over \{0\} \(local: not counted\), 3 over \{0,1\}\) in one clip; budget 2 = 0 distinct reduction groups \+ 1 \(the PP reduction\) \+ 1 tied parameter \(finalize\); fused: one over the pipeline stages$/,
    );
  });

  it("the matrix's budget, with no fused alternative; a pass says the most collectives across ranks", async () => {
    expect(await said("comm.budget", bucketed, {}, { budgets: { collectives: 0 } })).toEqual({
      status: "fail",
      line: "rank 0 issued 2 collectives, 1 of them across ranks (2 all_reduce; 1 over {0} (local: not counted), 1 over {0,1}) in one clip; budget 0 = the matrix's budget",
    });
    expect(await said("comm.budget", bucketed)).toEqual({ status: "pass", line: "at most 1 collectives across ranks per rank" });
  });
});

describe("errors.raised says who raised and what", () => {
  it("the first rank, the cell's reference and flag, every rank that raised, the error's first line", async () => {
    const one = await said("errors.raised", raisesAfterCollectivesOnRank1);
    expect(one.status).toBe("fail");
    expect(one.line).toMatch(/^rank 1 raised on a cell that asks for no error \(reference norm [\d.]+, error_if_nonfinite false\): rank 1 failed after its collectives$/);
    expect((await said("errors.raised", raisesAtOnce)).line).toMatch(/^rank 0 raised on a cell that asks for no error \(reference norm [\d.]+, error_if_nonfinite false\) \(ranks 0, 1 raised\): raised before any collective$/);
    expect(await said("errors.raised", bucketed, { regime: "nonfinite-nan" })).toEqual({ status: "pass", line: "the cell asks for an error (errors.nonfinite judges it)" });
    expect(await said("errors.raised", bucketed)).toEqual({ status: "pass", line: "" });
  });
});

describe("comm.budget's edges", () => {
  it("a collective over one rank is local whatever the rank's number (rank 12 alone is not two ranks)", async () => {
    const { crossRankCalls } = await import("../../harness/checks/comm-budget.ts");
    const kinds = { all_reduce: { calls: 3, bytes: 0 }, all_gather: { calls: 0, bytes: 0 }, broadcast: { calls: 0, bytes: 0 }, barrier: { calls: 0, bytes: 0 } };
    expect(crossRankCalls({ calls: 3, bytes: 0, byKind: kinds, byGroup: { "12": { calls: 1, bytes: 0 }, "3": { calls: 1, bytes: 0 }, "12,13": { calls: 1, bytes: 0 } } })).toBe(1);
  });

  it("a stage whose copies are all replicated may reduce once over the stage, named so", async () => {
    const dpReplicate2 = { layout: parseLayout("dp_replicate2") };
    expect(await said("comm.budget", barrierAfter(bucketed, "dp_replicate"), dpReplicate2)).toEqual({ status: "pass", line: "at most 1 collectives across ranks per rank" });
    const r = await said("comm.budget", barrierAfter(barrierAfter(bucketed, "dp_replicate"), "dp_replicate"), dpReplicate2);
    expect(r.line).toMatch(/budget 1 = 1 distinct reduction group \(\{0,1\} \(the stage\)\); fused: one all_reduce over \{0,1\} \(the stage\)$/);
  });
});

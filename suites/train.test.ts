/**
 * Training parity across layouts (SPEC §9 "train", issue 15): the cpu matrix's train section, where
 * correct subjects train bitwise alike in every layout and every known-bad optimizer-owned clipper is
 * caught by train.parity, plus what the check reports and that it can fail for each reason it has.
 */
import { describe, expect, it } from "vitest";
import { BUILTIN_SUBJECTS, OPTIMIZER_KNOWN_BAD_SUBJECTS } from "../harness/registry/registry.ts";
import { parseLayout } from "../harness/layout/layout.ts";
import { runTrain, type TrainCell } from "../harness/training/train-parity.ts";
import { trainCases } from "../matrix/train.ts";
import { InputError } from "../harness/errors.ts";
import { main } from "../cli/main.ts";

const T = 600_000;

describe("train section of the cpu matrix", () => {
  const cases = trainCases("cpu");
  it("has a failing cell for every optimizer-owned known-bad subject", () => {
    for (const n of OPTIMIZER_KNOWN_BAD_SUBJECTS) expect(cases.some((c) => c.subject === n && c.expect === "fail"), n).toBe(true);
  });
  for (const c of cases) {
    it(`${c.expect === "pass" ? "passes" : "catches"}: ${c.subject} on ${c.layouts.length} layouts (${c.note})`, { timeout: T }, async () => {
      const r = await runTrain(c, { subject: BUILTIN_SUBJECTS[c.subject]! });
      expect(r.check.status, r.check.message).toBe(c.expect);
      if (c.expect === "pass") expect(r.stepsCompared).toBe(c.steps);
      else expect(r.check.message).toMatch(/^step \d+/);
    });
  }
});

const base: TrainCell = {
  subject: "titan-mtp",
  layouts: [parseLayout("pp2,dp_shard2,ep2"), parseLayout("pp4")],
  model: "deepseek-v3-debug",
  dtype: "f32",
  normType: 2,
  regime: "finalize",
  seed: 0,
  steps: 2,
  init: "per-stage",
};

describe("train.parity reports", () => {
  it("a skipped sync at step 0 with the tensor, element and both values", { timeout: T }, async () => {
    const r = await runTrain({ ...base, subject: "init-unsynced" }, { subject: BUILTIN_SUBJECTS["init-unsynced"]! });
    expect(r.check.message).toMatch(/^step 0 .*tied copies differ: rank 2 replica mtp\.0\.embed_tokens\.weight param: element 0 \(global index 0 of \[2048, 256\]\) is .* canonical tok_embeddings\.weight on rank 0: /);
    expect(r.check.message).toContain("reproduce: clip-parity train --subject init-unsynced");
  });

  it("the same subject passes when every copy starts from the same values (--init same)", { timeout: T }, async () => {
    const r = await runTrain({ ...base, subject: "init-unsynced", init: "same" }, { subject: BUILTIN_SUBJECTS["init-unsynced"]! });
    expect(r.check.status, r.check.message).toBe("pass");
  });

  it("a cross-layout difference of an exact-class subject (a stage-dependent clip) at its first step", { timeout: T }, async () => {
    // replica-own-coef: tied copies differ after step 1, in the first layout already
    const one = await runTrain({ ...base, subject: "replica-own-coef", layouts: [parseLayout("pp4"), parseLayout("pp2")] }, { subject: BUILTIN_SUBJECTS["replica-own-coef"]! });
    expect(one.check.message).toMatch(/^step 1: in pp4, tied copies differ: rank 3 replica mtp\.0\.embed_tokens\.weight param/);
    // a clip that depends on the layout (max_norm nudged by pp) but agrees between tied copies, claiming exact
    const exact = BUILTIN_SUBJECTS.exact!;
    const nudged = { ...exact, name: "nudged", clip: (rank: Parameters<typeof exact.clip>[0], args: Parameters<typeof exact.clip>[1]) => exact.clip(rank, { ...args, maxNorm: args.maxNorm * (1 + rank.layout.pp * 2 ** -20) }) };
    const r = await runTrain({ ...base, subject: "nudged" }, { subject: nudged });
    expect(r.check.status).toBe("fail");
    expect(r.check.message).toMatch(/^step 1: layouts differ \(\d+ tensors or step counts\): rank \d+ \S+ (param|exp_avg|exp_avg_sq): element \d+ \(global index \d+ of \[[\d, ]+\]\) is .* in pp4; in pp2,dp_shard2,ep2: /);
    // an fp32-class subject with the same nudge: tolerated across layouts, reported as a note
    const loose = await runTrain({ ...base, subject: "nudged" }, { subject: { ...nudged, tolerance: "fp32" } });
    expect(loose.check.status, loose.check.message).toBe("pass");
    expect(loose.notes[0]).toMatch(/^step 1: /);
  });

  it("is deterministic: the same cell twice gives the same norms bitwise", { timeout: T }, async () => {
    const a = await runTrain({ ...base, layouts: [parseLayout("pp2"), parseLayout("pp4")] }, { subject: BUILTIN_SUBJECTS["titan-mtp"]! });
    const b = await runTrain({ ...base, layouts: [parseLayout("pp2"), parseLayout("pp4")] }, { subject: BUILTIN_SUBJECTS["titan-mtp"]! });
    expect(a.layouts[0]!.norms).toEqual(b.layouts[0]!.norms);
    expect(a.check.status).toBe("pass");
  });

  it("refuses bad input naming the flag", async () => {
    await expect(runTrain({ ...base, steps: 0 }, { subject: BUILTIN_SUBJECTS.exact! })).rejects.toThrow(/--steps/);
    await expect(runTrain({ ...base, layouts: [] }, { subject: BUILTIN_SUBJECTS.exact! })).rejects.toBeInstanceOf(InputError);
    // one layout, or the same layout twice, compares nothing across layouts: refused, never a vacuous pass
    await expect(runTrain({ ...base, layouts: [parseLayout("pp2"), parseLayout("pp2")] }, { subject: BUILTIN_SUBJECTS.exact! })).rejects.toThrow(/two or more distinct layouts; 1 given/);
    expect(await main(["train", "--layouts", "pp2", "--init", "random"])).toBe(2);
    expect(await main(["train", "--layouts", "pp3,ep2"])).toBe(2);
    expect(await main(["train", "pp2"])).toBe(2);
  });

  it("the command line: exit 0 on parity with layouts after --layouts, 1 on a difference", { timeout: T }, async () => {
    expect(await main(["train", "--layouts", "pp2,dp_shard2,ep2", "pp4", "--steps", "1", "--subject", "titan-mtp"])).toBe(0);
    expect(await main(["train", "--layouts", "pp2", "--layouts", "single", "--steps", "1", "--subject", "init-unsynced"])).toBe(1);
  });
});

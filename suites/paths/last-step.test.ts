/**
 * Issue 57: a training state wrong only at the last step. train.parity (harness/training/train-parity.ts) compares
 * the layouts' states after every step; a fault that shows at some step shows at every later one too (the state
 * carries it), so the earlier comparisons catch it first and mask the last one. Here the fault is made at the last
 * step alone: an `exact` clip that, on one rank of one layout, scales its gradient a second time at step T and
 * returns the right norm. The states agree bitwise after steps 0..T-1 and the norms at every step, so only the
 * comparison of the states after step T can fail.
 *
 * Kept weakening (suites/weakenings): train-parity-last-step-uncompared.patch (no comparison after the last step)
 * fails "the states agree after every step but the last: train.parity fails at step T".
 */
import { describe, expect, it } from "vitest";
import { runTrain, type TrainCell } from "../../harness/training/train-parity.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import type { Subject } from "../../harness/subject/api.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { fuzzManifest, fuzzPlan, singleRankPlan } from "../../harness/fuzz/case.ts";
import { SHARDED_CASE } from "./sharded-case.ts";

const sharded = SHARDED_CASE;
const model = fuzzManifest(sharded);
const plans = [fuzzPlan(sharded), singleRankPlan(sharded)];

/** `exact`, except that rank 1 of the two-rank layout scales its gradient by 1/2 once more at its clip number `at`. */
function wrongAtClip(at: number): Subject {
  const exact = BUILTIN_SUBJECTS.exact!;
  let clips = 0;
  return {
    ...exact,
    name: "wrong-at-one-step",
    clip: async (rank, args) => {
      const norm = await exact.clip(rank, args);
      if (rank.world === 2 && rank.rank === 1 && ++clips === at) for (const p of args.params) if (p.grad) rank.ops.scale_(p.grad, 0.5);
      return norm;
    },
  };
}

const cellOf = (steps: number): TrainCell => ({
  subject: "wrong-at-one-step",
  layouts: [parseLayout("dp_shard2"), parseLayout("single")],
  model: model.name,
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  steps,
  init: "same",
});
const train = (steps: number, subject: Subject) => runTrain(cellOf(steps), { subject, model, plans, repro: "(this test)" });

describe("train.parity: a state wrong only at the last step", () => {
  it("the states agree after every step but the last: train.parity fails at step T", { timeout: 60_000 }, async () => {
    const T = 3;
    const r = await train(T, wrongAtClip(T));
    expect(r.check.status).toBe("fail");
    expect(r.check.message).toMatch(
      /^step 3: layouts differ \(3 tensors or step counts\): rank 0 w param: element 4 \(global index 4 of \[8\]\) is \S+ \(0x[0-9a-f]{8}\) in single; in dp_shard2: \S+ \(0x[0-9a-f]{8}\)\n {2}reproduce: \(this test\)$/,
    );
    expect(r.stepsCompared).toBe(T - 1); // every step before it compared equal
    expect(r.layouts[0]!.norms).toEqual(r.layouts[1]!.norms); // the norms agree at every step, the last included
    expect(r.layouts[0]!.norms).toHaveLength(T);
  });

  it("the same clip passes when the run stops before its fault, and fails at the step it starts when that is not the last", { timeout: 60_000 }, async () => {
    const before = await train(2, wrongAtClip(3));
    expect(before.check.status, before.check.message).toBe("pass");
    expect(before.stepsCompared).toBe(2);
    const middle = await train(3, wrongAtClip(2));
    expect(middle.check.message).toMatch(/^step 2: layouts differ/);
  });
});

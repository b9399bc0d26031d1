/**
 * A fuzz training case (`steps` set): the `train` machinery (harness/training/train-parity.ts runTrain,
 * the loop of `clip-parity train`) on the case's synthetic model, per-stage initialisation, T steps
 * on the case's layout against one rank holding every parameter whole. Bugs that no single clip
 * shows are found here: a tie sync after init from the wrong copy (or none), and state that makes a
 * trainer right at step 1 and wrong from step 2 on.
 *
 * The case's layout runs first at every step, so that each rank's first clip is the case's own:
 * state a subject keeps between clips (its rank's module instance is shared by both layouts' rank 0)
 * shows from step 2 of the case, as in a trainer, not from the other layout's clip.
 */
import type { Subject } from "../subject/api.ts";
import { parseLayout, worldSize } from "../layout/layout.ts";
import { runTrain, type TrainCell } from "../training/train-parity.ts";
import { checkOptimizerCase, fuzzManifest, fuzzPlan, singleRankPlan, type FuzzCase, type FuzzTrainOutcome, type RunCaseOptions } from "./case.ts";

export async function runFuzzTrain(c: FuzzCase, subject: Subject, options: RunCaseOptions = {}): Promise<FuzzTrainOutcome> {
  if (c.steps === undefined) throw new Error("internal: runFuzzTrain runs training cases (steps)");
  if (subject.shape === "optimizer") checkOptimizerCase(c);
  const model = fuzzManifest(c);
  // one rank alone compares nothing across layouts: then only its tied copies are compared
  const alone = worldSize(c.layout) === 1;
  const cell: TrainCell = {
    subject: c.subject,
    model: model.name,
    dtype: c.dtype,
    normType: c.normType,
    regime: c.regime,
    seed: c.seed,
    steps: c.steps,
    layouts: alone ? [c.layout] : [c.layout, parseLayout("single")],
    init: "per-stage",
  };
  const plans = alone ? [fuzzPlan(c)] : [fuzzPlan(c), singleRankPlan(c)];
  const train = await runTrain(cell, { subject, model, plans, repro: options.repro, timeoutMs: options.timeoutMs ?? 20_000 });
  const violations = train.check.status === "fail" ? [{ id: train.check.id, message: train.check.message }] : [];
  return { train, violations };
}

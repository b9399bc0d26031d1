/**
 * `drop-step`: a loader that restores parameters and moments but not the optimizer step count, so
 * AdamW's bias correction restarts at step 1 after a resume (a bug trainers have shipped when the
 * step lives in the optimizer's param_groups rather than in the state tensors). resume.equal must
 * catch it on any cell that resumes after step 0.
 */
import { loadCheckpoint, type CheckpointLoader } from "../checkpoint.ts";

const dropStep: CheckpointLoader = {
  name: "drop-step",
  description: "restores parameters and moments but not the optimizer step count (bias correction restarts at step 1)",
  load(backend, dir, index, s) {
    const before = s.ranks.map((copies) => copies.map((c) => c.steps));
    loadCheckpoint(backend, dir, index, s);
    s.ranks.forEach((copies, r) => copies.forEach((c, i) => (c.steps = before[r]![i]!)));
  },
};

export default dropStep;

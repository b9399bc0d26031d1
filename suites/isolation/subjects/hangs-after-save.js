// Issue 41: clips correctly on the first step (the resume's checkpoint is written after it), then waits
// forever on the second: the harness is interrupted there, and the checkpoint must not be left behind.
import bucketed from "clip-parity/harness/subject/builtin/bucketed.ts";

let calls = 0;
export default {
  name: "hangs-after-save",
  async clip(rank, args) {
    if (++calls === 2) await new Promise((resolve) => setTimeout(resolve, 3_600_000));
    return bucketed.clip(rank, args);
  },
};

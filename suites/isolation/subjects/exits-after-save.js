// Issue 41: clips correctly on the first step (the resume's checkpoint is written after it), then calls
// process.exit on the second: the checkpoint in the scratch folder must not be left behind.
import bucketed from "clip-parity/harness/subject/builtin/bucketed.ts";

let calls = 0;
export default {
  name: "exits-after-save",
  async clip(rank, args) {
    if (++calls === 2) process.exit(3);
    return bucketed.clip(rank, args);
  },
};

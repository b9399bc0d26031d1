// A native crash, as a bug in an addon would end the process: rank 0 of a world of two ranks raises
// SIGSEGV in its own process (the signal a segmentation fault delivers). Every other cell gets the right
// answer (bucketed's clip), so only that one cell may fail (suites/isolation/supervisor.test.ts).
import bucketed from "clip-parity/harness/subject/builtin/bucketed.ts";
import { defineSubject } from "clip-parity";
export default defineSubject({
  name: "segfaults",
  async clip(rank, args) {
    if (rank.world === 2 && rank.rank === 0) process.kill(process.pid, "SIGSEGV");
    return bucketed.clip(rank, args);
  },
});

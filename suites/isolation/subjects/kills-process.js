// Kills the harness's whole process (not just its worker thread) on one cell: rank 0 of a world of two
// ranks sends SIGKILL to its own process (process.kill reaches the process from any thread). Every other
// cell gets the right answer (bucketed's clip), so only that one cell may fail (suites/isolation/supervisor.test.ts).
import bucketed from "clip-parity/harness/subject/builtin/bucketed.ts";
import { defineSubject } from "clip-parity";
export default defineSubject({
  name: "kills-process",
  async clip(rank, args) {
    if (rank.world === 2 && rank.rank === 0) process.kill(process.pid, "SIGKILL");
    return bucketed.clip(rank, args);
  },
});

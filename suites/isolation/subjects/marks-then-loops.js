// Writes the file $SUPERVISOR_TEST_MARK (so a test knows its clip runs), then never yields: the harness is
// ended from outside while it runs (suites/isolation/supervisor.test.ts: no process outlives the harness).
import { writeFileSync } from "node:fs";
export default {
  name: "marks-then-loops",
  async clip() {
    if (process.env.SUPERVISOR_TEST_MARK) writeFileSync(process.env.SUPERVISOR_TEST_MARK, "running");
    for (;;) {}
  },
};

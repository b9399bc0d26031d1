// Returns a right answer but leaves an interval running, which would fire into later cells.
import bucketed from "clip-parity/harness/subject/builtin/bucketed.ts";
export default {
  name: "leaves-interval",
  async clip(rank, args) {
    setInterval(() => {}, 1000);
    return bucketed.clip(rank, args);
  },
};

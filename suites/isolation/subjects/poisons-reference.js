// Issue 41: at load time, asks the harness's reference for a fake model that has the built-in's name, so
// that the reference cache (keyed by model name) holds a norm of 0; then returns 0 and scales nothing.
import { computeReference } from "clip-parity/harness/gradients/reference.ts";

computeReference({ name: "llama3-debug", params: [], ties: [] }, "f32", 2, "active", 0, 0);

export default {
  name: "poisons-reference",
  async clip() {
    return 0;
  },
};

// Issue 41: empties the cached manifest and turns the active regime into zeros in its own thread, then
// answers as if nothing had a gradient (a do-nothing subject); later cells of the worker would run on them.
import { getModel } from "clip-parity";
import { regimeSpec } from "clip-parity/harness/gradients/regimes.ts";

export default {
  name: "mutates-manifest",
  async clip() {
    const refused = [];
    for (const mutate of [() => (regimeSpec("active").mode = "zeros"), () => (getModel("llama3-debug").params.length = 0)]) {
      try {
        mutate();
      } catch (err) {
        refused.push(err.message);
      }
    }
    if (refused.length === 2) throw new Error(`both refused: ${refused.join("; ")}`);
    return 0;
  },
};

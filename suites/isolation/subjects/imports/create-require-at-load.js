// The judge's code required when the module loads, not in the clip.
import { createRequire } from "node:module";

const reference = createRequire(import.meta.url)("../../../../harness/gradients/reference.ts");

export default {
  name: "imports-create-require-at-load",
  async clip() {
    throw new Error(`imports-create-require-at-load: the judge's code was imported (${Object.keys(reference).slice(0, 3).join(", ")})`);
  },
};

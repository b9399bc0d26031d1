/**
 * Test-local known-bad subject: `reference` that keeps a float32 scratch copy of its first gradient
 * and never frees it (a forgotten `ops.free`). The norm and the scaling are right; only `memory.leak`
 * fails (suites/strength/checks.test.ts).
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import reference from "../../../harness/subject/builtin/reference.ts";

export default defineSubject({
  name: "leaky",
  description: "reference, plus a scratch clone of one gradient that is never freed",
  tolerance: "exact",
  catchBy: ["memory.leak"],
  async clip(rank, args) {
    const first = args.params.find((p) => p.grad && p.grad.numel > 0);
    if (first?.grad) rank.ops.clone(first.grad); // BUG: never freed
    return reference.clip(rank, args);
  },
});

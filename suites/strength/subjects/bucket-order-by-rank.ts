/**
 * Test-local known-bad subject: `bucketed` that issues its bucket all_reduces largest local contribution
 * first (a "reduce the big buckets early" heuristic). Each rank sorts by its own partials, so two ranks that
 * share two reduction groups can wait in different collectives: the hang a real NCCL job hits. The
 * order differs only where two buckets' partials are close, or empty on one rank and not on another:
 * on the debug models that happens for the inf-norm alone (every bucket's max is near 2^e); for finite p
 * the regression cells (matrix/regressions.json) hold such cases. Caught by `liveness`.
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { bucketedClip } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "bucket-order-by-rank",
  description: "bucketed, but buckets are all_reduced largest local partial first (an order that differs by rank)",
  tolerance: "fp32",
  catchBy: ["liveness"],
  async clip(rank, args) {
    // BUG: each rank sorts by its own partials
    return bucketedClip(rank, args, { order: (buckets) => buckets.sort((a, b) => b.acc - a.acc) });
  },
});

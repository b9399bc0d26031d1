/**
 * `inf-as-sum`: `bucketed` whose collectives always SUM, also for the inf-norm (torchtitan issues
 * 596/649): the local maxima are right, but the per-bucket and PP all_reduces add the ranks' maxima
 * instead of taking the largest. Bug of SPEC §1; caught by `parity.norm` (norm inf, world > 1).
 */
import { defineSubject } from "../api.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

export default defineSubject({
  name: "inf-as-sum",
  description: "inf-norm reduced with SUM instead of MAX across ranks",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  clip: (rank, args) => bucketedClip(rank, args, { op: () => "sum" }), // BUG: should be "max" for the inf-norm
});

/**
 * Test-local known-bad subject: `bucketed` that truncates a finite norm type to an integer (an `int`
 * parameter, or `Math.trunc` on the way in): p = 1.5 becomes the 1-norm, p = 3 stays right. Caught by
 * `parity.norm` on cells whose p is not an integer; the cpu matrix has p = 1.5 on several layouts, models
 * and dtypes.
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { bucketedClip } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "p-truncated",
  description: "bucketed, but a finite norm type is truncated to an integer",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const normType = Number.isFinite(args.normType) ? Math.trunc(args.normType) : args.normType; // BUG
    const truncated = { ...args, normType };
    return bucketedClip(rank, truncated);
  },
});

/**
 * Test-local known-bad subject: `bucketed` whose root is right for 1, 2 and inf but takes the square
 * root for every other p (a general-p branch written as `Math.sqrt`). Caught by `parity.norm` only on a
 * cell whose norm type is not 1, 2 or inf: the cpu matrix has p = 1.5 and 3 by design.
 */
import { clipCoefficient, defineSubject } from "../../../harness/subject/api.ts";
import { checkFinite, scaleAll } from "../../../harness/subject/common.ts";
import { bucketedPowerSum } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "general-p-as-2",
  description: "bucketed, but the root of a general p-norm is taken as a square root",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const { params, normType } = args;
    const total = await bucketedPowerSum(rank, args);
    const norm = Math.fround(normType === Infinity || normType === 1 ? total : Math.sqrt(total)); // BUG: p other than 2
    checkFinite(norm, args);
    scaleAll(rank, params, clipCoefficient(args.maxNorm, norm));
    return norm;
  },
});

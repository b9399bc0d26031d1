/**
 * `exact`: `bucketed` with exact accumulators exchanged instead of floating partial sums.
 *
 * Each bucket (one per reduction group) holds an exact power sum (an integer times 2^-1074): local
 * sums, all_reduces and the final additions never round, so the norm does not depend on the layout,
 * the bucket order or the summation order, and equals the reference bitwise. For inf the partials
 * are maxima (exact anyway) reduced with MAX.
 */
import { defineSubject } from "../api.ts";
import { exactPowerSum, finishClip } from "../common.ts";

export default defineSubject({
  name: "exact",
  description: "bucketed with exact accumulators in the all_reduces: bitwise layout-independent",
  tolerance: "exact",
  async clip(rank, args) {
    const { total } = await exactPowerSum(rank, args.params, args.normType);
    return finishClip(rank, args, total);
  },
});

/**
 * `reference`: SPEC §6 computed distributed, as the oracle would be if it ran SPMD.
 *
 * Each rank adds the EXACT power sums (integers times 2^-1074, no rounding at all) of the canonical
 * copies it holds, counting a param only on the rank whose coordinate is 0 on each of the param's
 * Replicate axes (so replicated shards are counted once); a Partial(sum) gradient is first summed over
 * its Partial axes (exactly: two partials add without rounding) and counted at coordinate 0 there. One all_reduce of the exact value over the
 * whole PP stage (every non-pp axis; the sparse mesh spans the same ranks), one over pp, and the total
 * is rounded to float64 exactly once: bitwise equal to the reference on every layout.
 * For inf the partials are maxima, which are exact anyway: reduced with MAX as plain numbers.
 */
import { defineSubject, type Exact } from "../api.ts";
import { counts, finishClip, leaderMeasure, stageGroup } from "../common.ts";

export default defineSubject({
  name: "reference",
  description: "SPEC §6 distributed: exact partials, replicas counted once, one all_reduce per stage, then pp",
  tolerance: "exact",
  async clip(rank, args) {
    const { params, normType } = args;
    const ops = rank.ops;
    const counted = params.filter(counts);

    if (normType === Infinity) {
      let max = 0;
      for (const p of counted) max = Math.max(max, (await leaderMeasure(rank, p, (g) => ops.maxAbs(g))) ?? 0);
      max = await rank.allReduce(stageGroup(rank), max, "max");
      max = await rank.allReduce(rank.group("pp"), max, "max");
      return finishClip(rank, args, max);
    }

    let sum: Exact = ops.exactZero();
    for (const p of counted) sum = ops.exactAdd(sum, (await leaderMeasure(rank, p, (g) => ops.exactSumAbsPow(g, normType))) ?? ops.exactZero());
    sum = await rank.allReduce(stageGroup(rank), sum, "sum");
    sum = await rank.allReduce(rank.group("pp"), sum, "sum");
    return finishClip(rank, args, ops.exactToNumber(sum));
  },
});

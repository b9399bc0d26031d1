/**
 * Test-local known-bad subject: `titan` whose replica-leader test is off by one (`i > 0` for
 * `i >= 0`): a parameter's FIRST mesh axis is then treated as Replicate, so on a parameter sharded
 * over its first axis only the rank at coordinate 0 counts its shard and the norm misses the others.
 * The debug models never shard a first mesh axis (dp_replicate comes first and is Replicate); a
 * sub-mesh parameter does. Caught by parity.norm on a regression cell (matrix/regressions.json).
 */
import { defineSubject, type ParamView, type RankContext } from "../../../harness/subject/api.ts";
import { combine, counts, finishClip, localPartial, reduceOp, SPARSE_STAGE_AXES, STAGE_AXES, stageGroup } from "../../../harness/subject/common.ts";

function isLeader(rank: RankContext, p: ParamView): boolean {
  const axes = p.mesh === "sparse" ? SPARSE_STAGE_AXES : STAGE_AXES;
  return axes.every((a) => {
    const i = p.meshAxes.indexOf(a);
    return (i > 0 && p.placements[i]!.kind !== "replicate") || rank.coords[a] === 0; // BUG: i >= 0
  });
}

export default defineSubject({
  name: "leader-first-axis",
  description: "titan, but a shard on the parameter's first mesh axis counts on coordinate 0 only",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    let total = 0;
    for (const p of params) if (counts(p) && isLeader(rank, p)) total = combine(total, localPartial(rank.ops, p.grad, normType), normType);
    total = await rank.allReduce(stageGroup(rank), total, op);
    total = await rank.allReduce(rank.group("pp"), total, op);
    return finishClip(rank, args, total);
  },
});

/**
 * `tp-replicate-summed`: `bucketed` that reduces every dense param over the tp axis, as if it were
 * sharded there: the grads of Replicate-on-TP params (norms, routers) are identical on every TP rank
 * and get summed tp times (NeMo-RL PR 3788). Bug of SPEC §1; caught by `parity.norm` (tp > 1).
 */
import { defineSubject, type ParamView, type RankContext } from "../api.ts";
import { reduceFlags } from "../common.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

/** BUG: the tp axis is always reduced over, whatever its placement. */
const groupWithTp = (rank: RankContext, p: ParamView) => rank.groupOf(p, reduceFlags(p).map((shard, i) => shard || p.meshAxes[i] === "tp"));

export default defineSubject({
  name: "tp-replicate-summed",
  description: "Replicate-on-tp grads summed over tp: counted tp times",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  clip: (rank, args) => bucketedClip(rank, args, { reductionGroup: groupWithTp }),
});

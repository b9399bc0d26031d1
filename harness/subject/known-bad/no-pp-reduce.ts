/**
 * `no-pp-reduce`: `bucketed` without the pipeline all_reduce (torchtitan issue 596): each PP stage
 * reports and clips with the norm of its own layers only. Bug of SPEC §1; caught by `parity.norm`
 * (on any layout with pp > 1).
 */
import { defineSubject } from "../api.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

export default defineSubject({
  name: "no-pp-reduce",
  description: "bucketed without the PP all_reduce (torchtitan issue 596)",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  clip: (rank, args) => bucketedClip(rank, args, { reduceOverPp: async (_rank, stageTotal) => stageTotal }), // BUG: no all_reduce over pp
});

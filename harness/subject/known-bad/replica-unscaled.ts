/**
 * `replica-unscaled`: `bucketed` that computes the right norm but scales only the canonical copy of
 * a tied parameter, leaving its replica on the last PP stage unclipped, so the copies drift apart
 * (the "one copy left unscaled" half of the MTP+PP / Megatron PR 7227 bugs).
 * Bug of SPEC §1; caught by `scaling.replicas` (models with a tie group, pp > 1).
 */
import { defineSubject } from "../api.ts";
import { scaleAll } from "../common.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

export default defineSubject({
  name: "replica-unscaled",
  description: "right norm, but tied replicas are not scaled",
  tolerance: "fp32",
  catchBy: ["scaling.replicas"],
  clip: (rank, args) =>
    bucketedClip(rank, args, { scale: (r, params, coef) => scaleAll(r, params.filter((p) => p.canonical), coef) }), // BUG: replicas skipped
});

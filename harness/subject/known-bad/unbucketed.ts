/**
 * `unbucketed`: `bucketed`'s norm, but one all_reduce per parameter over that parameter's reduction
 * group (then pp), like a per-DTensor `full_tensor()` of each local norm: hundreds of tiny
 * collectives per step where a handful would do. Caught by `comm.budget`.
 */
import { defineSubject } from "../api.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

export default defineSubject({
  name: "unbucketed",
  description: "right norm with one all_reduce per parameter",
  tolerance: "fp32",
  catchBy: ["comm.budget"],
  clip: (rank, args) => bucketedClip(rank, args, { bucketKey: (group, p) => `${group.key}|${p.fqn}` }), // BUG: a bucket per parameter
});

/**
 * `replica-twice`: `bucketed` that counts a tied parameter once per physical copy: the MTP
 * embedding replica (or a tied output) on the last PP stage is added to the norm as well as the
 * canonical copy on stage 0 (torchtitan MTP+PP, Megatron PR 7227: 40 instead of 28.28).
 * Bug of SPEC §1; caught by `parity.norm` (models with a tie group, pp > 1).
 */
import { defineSubject, type ParamView, type Tensor } from "../api.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

/** BUG: replicas (canonical === false) are not skipped. */
const everyCopy = (p: ParamView): p is ParamView & { grad: Tensor } => p.grad !== null;

export default defineSubject({
  name: "replica-twice",
  description: "counts tied replicas in the norm as well as their canonical copy",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  clip: (rank, args) => bucketedClip(rank, args, { counts: everyCopy }),
});

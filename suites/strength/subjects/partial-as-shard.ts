/**
 * Test-local known-bad subject: `bucketed` that treats a Partial(sum) gradient as if it were Shard: it
 * takes the norm^p of each rank's partial and all_reduces it over the Partial axes with the Shard ones,
 * so the norm is that of the partials side by side (sum of |partial|^p) instead of that of their sum
 * (|sum of partials|^p). Every other placement is handled right. Caught by parity.norm on the cpu
 * matrix's Partial cells (llama3-debug-sp with tp > 1) and by the fuzzer.
 */
import { defineSubject, type ParamView } from "../../../harness/subject/api.ts";
import { localPartial } from "../../../harness/subject/common.ts";
import { bucketedClip } from "../../../harness/subject/builtin/bucketed-core.ts";

/** BUG: Partial reduced like Shard (the flags of every axis that is not Replicate). */
const partialAsShard = (p: ParamView): boolean[] => p.placements.map((x) => x.kind !== "replicate");

export default defineSubject({
  name: "partial-as-shard",
  description: "bucketed, but a Partial(sum) gradient's local norm^p is all_reduced as if it were a Shard",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  async clip(rank, args) {
    return bucketedClip(rank, args, {
      partial: async (r, p, normType) => localPartial(r.ops, p.grad, normType), // each rank's partial, never summed
      reductionGroup: (r, p) => r.groupOf(p, partialAsShard(p)),
    });
  },
});

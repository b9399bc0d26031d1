/**
 * Test-local known-bad subject: `bucketed` that first takes a copy of every local gradient (as
 * `[g.detach().clone() for g in grads]` before a norm would) and frees them after the clip: the values
 * are right, but a rank holds twice its gradients. Caught by `memory.peak` wherever a rank holds more than
 * its largest shard plus the slack: on every model cell, and on the fuzzer's cases once its budget is
 * sized to the case (FUZZ_SCRATCH_SLACK_BYTES; the 1 MiB of a model cell hid it there).
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { finishClip } from "../../../harness/subject/common.ts";
import { bucketedPowerSum } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "copy-every-grad",
  description: "bucketed, holding a copy of every local gradient during the clip",
  tolerance: "fp32",
  catchBy: ["memory.peak"],
  async clip(rank, args) {
    const copies = args.params.flatMap((p) => (p.grad ? [rank.ops.clone(p.grad)] : [])); // BUG: O(local grads) scratch
    const total = await bucketedPowerSum(rank, args);
    for (const c of copies) rank.ops.free(c);
    return finishClip(rank, args, total);
  },
});

/**
 * Test-local known-bad subject: `bucketed` that leaves a parameter out of the buckets when its local
 * shard is empty (a one-line "nothing to add" shortcut). A rank that holds only empty shards of every
 * parameter of a reduction group then never opens that group's bucket and skips its all_reduce, while
 * the other members wait in it: the hang a real NCCL job hits. Caught by `liveness` only on a cell with
 * such a group (suites/strength/regressions.test.ts, matrix/regressions.json).
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import { finishClip } from "../../../harness/subject/common.ts";
import { bucketedTotal } from "./bucketed-total.ts";

export default defineSubject({
  name: "skip-empty-bucket",
  description: "bucketed, but empty local shards open no bucket (their group's all_reduce is skipped)",
  tolerance: "fp32",
  catchBy: ["liveness"],
  async clip(rank, args) {
    // BUG: an empty local shard opens no bucket, yet it still belongs to its group's collective
    return finishClip(rank, args, await bucketedTotal(rank, args, { leaveOut: (p) => p.grad!.numel === 0 }));
  },
});

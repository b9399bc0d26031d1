/**
 * Test-local known-bad subject: `bucketed` that leaves a parameter out of the buckets when its local
 * shard is empty (a one-line "nothing to add" shortcut). A rank that holds only empty shards of every
 * parameter of a reduction group then never opens that group's bucket and skips its all_reduce, while
 * the other members wait in it: the hang a real NCCL job hits. Caught by `liveness` only on a cell with
 * such a group (suites/strength/regressions.test.ts, matrix/regressions.json).
 */
import { defineSubject, type ParamView, type Tensor } from "../../../harness/subject/api.ts";
import { counts } from "../../../harness/subject/common.ts";
import { bucketedClip } from "../../../harness/subject/builtin/bucketed-core.ts";

/** BUG: an empty local shard opens no bucket, yet it still belongs to its group's collective. */
const nonEmpty = (p: ParamView): p is ParamView & { grad: Tensor } => counts(p) && p.grad.numel !== 0;

export default defineSubject({
  name: "skip-empty-bucket",
  description: "bucketed, but empty local shards open no bucket (their group's all_reduce is skipped)",
  tolerance: "fp32",
  catchBy: ["liveness"],
  async clip(rank, args) {
    return bucketedClip(rank, args, { counts: nonEmpty });
  },
});

/**
 * `bucketed`: transformers' clip after PR 46113 (no full replicas any more).
 *
 * Each rank computes norm^p of its LOCAL shards in float64 and adds them into buckets keyed by the
 * process group the shard must be reduced over (the param's mesh and its Shard axes), issues
 * one all_reduce per bucket (a Partial(sum) gradient's partials are summed over its Partial axes first),
 * adds the buckets, and all_reduces over pp. Only the canonical copy of a tied parameter counts; every
 * copy is scaled. The steps are written once in bucketed-core.ts, which the known-bad subjects share.
 */
import { defineSubject } from "../api.ts";
import { bucketedClip } from "./bucketed-core.ts";

export default defineSubject({
  name: "bucketed",
  description: "transformers after PR 46113: local norm^p, one all_reduce per reduction group, then pp",
  tolerance: "fp32",
  clip: (rank, args) => bucketedClip(rank, args),
});

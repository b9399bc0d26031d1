/** The small case the paths tests train on: dp_shard2, one parameter of 8 elements sharded over two ranks (against the same on one rank). */
import { validateCase, type FuzzCase } from "../../harness/fuzz/case.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { Shard } from "../../harness/model/plan.ts";

export const SHARDED_CASE: FuzzCase = validateCase({
  subject: "x",
  layout: parseLayout("dp_shard2"),
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  params: [{ name: "w", shape: [8], stage: 0, mesh: "dense", axes: ["dp_shard"], placements: [Shard(0)], replicas: [] }],
});

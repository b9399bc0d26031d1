/**
 * Issue 42: the fuzzer's bucket-count oracle (collectives.buckets) fires on a bucketing subject with one
 * collective too few: `bucketed` that skips its pp all_reduce where the pp group is this rank alone.
 * Its norm is right (a reduction over one rank changes nothing), so no check of the cell can see it:
 * only the oracle, which requires one all_reduce per reduction group (+1 for pp), exactly.
 */
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defineSubject } from "../../harness/subject/api.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { bucketedClip } from "../../harness/subject/builtin/bucketed-core.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { Partial, Shard } from "../../harness/model/plan.ts";
import { validateCase } from "../../harness/fuzz/case.ts";
import { BUCKETS_PROPERTY, runFuzzCase } from "../../harness/fuzz/run.ts";
import { envSeed, fuzzSubject } from "../../harness/fuzz/fuzz.ts";

const outDir = mkdtempSync(join(tmpdir(), "clip-parity-bucket-oracle-"));
afterAll(() => rmSync(outDir, { recursive: true, force: true }));

/** Named `bucketed` so that the oracle judges it as it judges bucketed. */
const oneCollectiveShort = defineSubject({
  ...BUILTIN_SUBJECTS.bucketed!,
  clip: (rank, args) =>
    bucketedClip(rank, args, {
      reduceOverPp: async (r, stageTotal, op) => {
        const pp = r.group("pp");
        return pp.ranks.length === 1 ? stageTotal : r.allReduce(pp, stageTotal, op); // one collective fewer at pp = 1
      },
    }),
});

/** `bucketed` that swaps its pp all_reduce for another collective, or adds one: the count of calls or of all_reduces is off. */
const withBarrier = (instead: boolean) =>
  defineSubject({
    ...BUILTIN_SUBJECTS.bucketed!,
    clip: (rank, args) =>
      bucketedClip(rank, args, {
        reduceOverPp: async (r, stageTotal, op) => {
          await r.barrier(r.group("pp"));
          return instead ? stageTotal : r.allReduce(r.group("pp"), stageTotal, op);
        },
      }),
  });

const dpShard2 = validateCase({
  subject: "bucketed",
  layout: parseLayout("dp_shard2"),
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  params: [{ name: "w", shape: [4], stage: 0, mesh: "dense", axes: ["dp_shard"], placements: [Shard(0)], replicas: [] }],
});

describe("the fuzzer's bucket-count oracle", () => {
  it("passes bucketed and fires on one collective too few, where every check passes", async () => {
    expect((await runFuzzCase(dpShard2, BUILTIN_SUBJECTS.bucketed!)).violations).toEqual([]);
    const { result, violations } = await runFuzzCase(dpShard2, oneCollectiveShort);
    expect(result.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(violations).toEqual([
      {
        id: BUCKETS_PROPERTY,
        message:
          "rank 0 issued 1 all_reduce (1 collectives in all); it holds 1 distinct reduction groups and 0 Partial gradients to sum, " +
          "so 2 were expected (one per group and per Partial gradient + 1 for pp)",
      },
    ]);
  });

  it("counts every collective and the all_reduces apart: a barrier instead of the pp all_reduce, or beside it, fires", async () => {
    for (const instead of [true, false]) {
      const { violations } = await runFuzzCase(dpShard2, withBarrier(instead));
      expect(violations.filter((v) => v.id === BUCKETS_PROPERTY).map((v) => v.message)).toEqual([
        `rank 0 issued ${instead ? 1 : 2} all_reduce (${instead ? 2 : 3} collectives in all); it holds 1 distinct reduction groups and 0 Partial gradients to sum, ` +
          "so 2 were expected (one per group and per Partial gradient + 1 for pp)",
      ]);
    }
  });

  it("counts one more for a Partial gradient's sum and for each tied parameter an optimizer-owned clipper finalizes", async () => {
    const partial = validateCase({ ...dpShard2, params: [{ ...dpShard2.params[0]!, placements: [Partial] }] });
    expect((await runFuzzCase(partial, BUILTIN_SUBJECTS.bucketed!)).violations).toEqual([]);
    const tied = validateCase({
      ...dpShard2,
      subject: "titan-mtp",
      layout: parseLayout("pp2"),
      params: [{ name: "embed", shape: [4], stage: 0, mesh: "dense", axes: [], placements: [], replicas: [{ stage: 1, mesh: "dense", axes: [], placements: [] }] }],
    });
    expect((await runFuzzCase(tied, BUILTIN_SUBJECTS["titan-mtp"]!)).violations).toEqual([]);
  });

  it("the fuzzer's search finds it", { timeout: 120_000 }, async () => {
    const run = await fuzzSubject(oneCollectiveShort, { seed: envSeed(), numRuns: 100, targets: [BUCKETS_PROPERTY], outDir, subjectSpec: "bucketed" });
    expect(run.details.failed).toBe(true);
    expect(run.counterexample!.violations.map((v) => v.id)).toContain(BUCKETS_PROPERTY);
  });
});

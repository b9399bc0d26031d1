/**
 * The fuzzer's runner (harness/fuzz/run.ts) where its other tests do not look (surviving mutants of the
 * scoped Stryker run, docs/strength.md): which cases go to the training loop, which subjects the
 * bucket-count oracle judges and what it counts (only copies with a gradient; a reduction group by its
 * Shard axes, Partial ones not; finalized ties for an optimizer-owned clipper only), the checks' failures
 * as violations, and the fuzz budget's small scratch slack.
 */
import { describe, expect, it } from "vitest";
import { defineSubject } from "../../harness/subject/api.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { Partial, Replicate, Shard } from "../../harness/model/plan.ts";
import { validateCase, type FuzzCase } from "../../harness/fuzz/case.ts";
import { CHECK_IDS } from "../../harness/checks/index.ts";
import { TRAIN_CHECK } from "../../harness/training/train-parity.ts";
import { BUCKETING_SUBJECTS, BUCKETS_PROPERTY, PROPERTY_IDS, runAnyCase, runFuzzCase } from "../../harness/fuzz/run.ts";
import { reportsOn, scratchOnRank1, skipsPpOnRank1 } from "./subjects.ts";

const bucketed = BUILTIN_SUBJECTS.bucketed!;
const titanMtp = BUILTIN_SUBJECTS["titan-mtp"]!;
/** Judged by the oracle as bucketed is (the oracle goes by the subject's name). */
const asBucketed = (s: typeof bucketed) => defineSubject({ ...s, name: "bucketed" });

const base: FuzzCase = validateCase({
  subject: "bucketed",
  layout: parseLayout("dp_shard2"),
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  params: [{ name: "w", shape: [4], stage: 0, mesh: "dense", axes: ["dp_shard"], placements: [Shard(0)], replicas: [] }],
});

const tiedPp2 = validateCase({
  ...base,
  layout: parseLayout("pp2"),
  params: [{ name: "embed", shape: [4], stage: 0, mesh: "dense", axes: [], placements: [], replicas: [{ stage: 1, mesh: "dense", axes: [], placements: [] }] }],
});

const buckets = (v: { id: string; message: string }[]) => v.filter((x) => x.id === BUCKETS_PROPERTY);

describe("fuzz/run.ts", () => {
  it("its ids: the bucketing subjects, the oracle's property, every property", () => {
    expect(BUCKETING_SUBJECTS).toEqual(["bucketed", "exact", "titan-mtp"]);
    expect(BUCKETS_PROPERTY).toBe("collectives.buckets");
    expect(PROPERTY_IDS).toEqual([...CHECK_IDS, "collectives.buckets", TRAIN_CHECK]);
  });

  it("a case with steps is a training run; runFuzzCase refuses one", async () => {
    const train = { ...base, steps: 2 };
    const out = await runAnyCase(train, bucketed);
    expect("train" in out).toBe(true);
    await expect(runFuzzCase(train, bucketed)).rejects.toThrow(/^internal: runFuzzCase runs clip cases; a training case \(steps\) goes to runAnyCase$/);
    expect("result" in (await runAnyCase(base, bucketed))).toBe(true);
  });

  it("an optimizer-owned subject's case is held to the optimizer's rules; a clip subject's is not", async () => {
    const twoReplicas = validateCase({
      ...base,
      layout: parseLayout("pp3"),
      params: [{ name: "embed", shape: [4], stage: 0, mesh: "dense", axes: [], placements: [], replicas: [{ stage: 1, mesh: "dense", axes: [], placements: [] }, { stage: 2, mesh: "dense", axes: [], placements: [] }] }],
    });
    await expect(runFuzzCase(twoReplicas, titanMtp)).rejects.toThrow(/2 replicas; an optimizer-owned subject's cases tie one replica on the last stage/);
    expect((await runFuzzCase(twoReplicas, bucketed)).violations).toEqual([]);
  });

  it("a check's failure is a violation, with its message", async () => {
    const { result, violations } = await runFuzzCase(base, reportsOn("off-on-rank-1", 1, (n) => Math.fround(n * 1.5)));
    const failed = result.checks.filter((c) => c.status === "fail");
    expect(failed.map((c) => c.id)).toContain("parity.norm");
    expect(violations).toEqual(failed.map((c) => ({ id: c.id, message: c.message })));
  });

  it("the scratch slack of a fuzz case is a few scalars', not a model cell's 1 MiB", async () => {
    const { violations } = await runFuzzCase(base, scratchOnRank1(1 << 10));
    expect(violations.map((v) => v.id)).toContain("memory.peak");
  });

  it("the oracle judges the bucketing subjects only, and not a run that hung", async () => {
    const extra = (name: string) =>
      defineSubject({
        ...bucketed,
        name,
        clip: async (rank, args) => {
          const norm = await bucketed.clip(rank, args);
          await rank.barrier(rank.group("dp_shard"));
          return norm;
        },
      });
    expect(buckets((await runFuzzCase(base, extra("bucketed"))).violations)).toHaveLength(1);
    expect(buckets((await runFuzzCase(base, extra("my-clip"))).violations)).toEqual([]);
    const hung = await runFuzzCase({ ...base, layout: parseLayout("pp2"), params: [{ ...base.params[0]!, axes: [], placements: [] }] }, asBucketed(skipsPpOnRank1));
    expect(hung.result.liveness).toBeTruthy();
    expect(buckets(hung.violations)).toEqual([]);
  });

  it("counts only copies with a gradient (sparse regime: the second parameter has none)", async () => {
    const sparse = validateCase({
      ...base,
      regime: "sparse",
      params: [base.params[0]!, { name: "frozen", shape: [4], stage: 0, mesh: "dense", axes: ["dp_shard"], placements: [Replicate], replicas: [] }],
    });
    expect((await runFuzzCase(sparse, bucketed)).violations).toEqual([]);
  });

  it("a reduction group is a copy's Shard axes: a Replicate copy reduces apart, a Partial axis is not one", async () => {
    const shardAndReplicate = validateCase({
      ...base,
      params: [base.params[0]!, { name: "r", shape: [4], stage: 0, mesh: "dense", axes: ["dp_shard"], placements: [Replicate], replicas: [] }],
    });
    expect((await runFuzzCase(shardAndReplicate, bucketed)).violations).toEqual([]);
    const partial = validateCase({
      ...base,
      layout: parseLayout("dp_shard2,tp2"),
      params: [
        { name: "a", shape: [4], stage: 0, mesh: "dense", axes: ["dp_shard", "tp"], placements: [Shard(0), Partial], replicas: [] },
        { name: "b", shape: [4], stage: 0, mesh: "dense", axes: ["dp_shard", "tp"], placements: [Shard(0), Replicate], replicas: [] },
      ],
    });
    expect((await runFuzzCase(partial, bucketed)).violations).toEqual([]);
  });

  it("finalized ties count for an optimizer-owned clipper only, and its message says so", async () => {
    expect((await runFuzzCase(tiedPp2, bucketed)).violations).toEqual([]);
    const oneMore = defineSubject({
      ...titanMtp,
      clip: async (rank, args) => {
        const norm = await titanMtp.clip(rank, args);
        await rank.barrier(rank.group("pp"));
        return norm;
      },
    });
    expect(buckets((await runFuzzCase(tiedPp2, oneMore)).violations).map((v) => v.message)[0]).toMatch(
      /^rank 0 issued \d+ all_reduce \(\d+ collectives in all\); .* were expected \(one per group and per Partial gradient \+ 1 for pp \+ 1 for the tied parameters it finalizes\)$/,
    );
  });
});

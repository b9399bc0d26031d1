/**
 * The fuzzer on optimizer-owned subjects (shape "optimizer": they finalize tied gradients and sync
 * tied copies themselves), issue 22: cases with tie groups as trainers tie them, two tied parameters
 * over one set of ranks, the `finalize` regime (each copy its own partial gradient), and 2-3 step
 * training cases run through the `train` machinery (harness/fuzz/train.ts). The correct `titan-mtp`
 * holds every property; each known-bad subject whose bug only a training run shows (an init sync
 * from the wrong copy or of one chunk, state wrong from step 2 on) and each built-in optimizer-owned
 * known-bad subject is caught by the check its bug breaks (the clip-shaped ones: suites/fuzz/strength.test.ts).
 *
 * Every subject runs in a worker of the pool, as `clip-parity fuzz` and `cell --file` run it (a user
 * module gets one instance per rank there: finalize-once's flag is a rank's own).
 */
import { afterAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseLayout } from "../../harness/layout/layout.ts";
import { Replicate, Shard } from "../../harness/model/plan.ts";
import { InputError } from "../../harness/errors.ts";
import { caseArb } from "../../harness/fuzz/arbitraries.ts";
import { caseFromFile, caseToFile, checkOptimizerCase, validateCase, type FuzzCase } from "../../harness/fuzz/case.ts";
import { OPTIMIZER_FEATURES, optimizerCoverage } from "../../harness/fuzz/coverage.ts";
import { fuzzIsolated, SELF_TEST_RUNS } from "../../harness/fuzz/fuzz.ts";
import { REPLAY_JOB, type Replay } from "../../harness/fuzz/replay.ts";
import { runOneJob } from "../../harness/sandbox/pool.ts";

const SEED = 5_050_505;
const dir = mkdtempSync(join(tmpdir(), "clip-parity-fuzz-optimizer-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const STRENGTH = "./suites/strength/subjects";

/** Known-bad optimizer-owned subjects and the checks their bug breaks. */
const KNOWN_BAD: [subject: string, targets: string[]][] = [
  ["finalize-forgotten", ["parity.norm"]],
  ["replica-own-coef", ["scaling.replicas"]],
  ["init-unsynced", ["train.parity"]],
  [`${STRENGTH}/init-from-last-stage.ts`, ["train.parity"]],
  [`${STRENGTH}/init-first-chunk.ts`, ["train.parity"]],
];

/** pp2, one tied parameter of 4 elements (a copy on each stage), both copies sharded alike on dp_shard2. */
function tiedCase(subject: string, more: Partial<FuzzCase> = {}): FuzzCase {
  const copy = { mesh: "dense" as const, axes: ["dp_shard" as const], placements: [Shard(0)] };
  return {
    subject,
    layout: parseLayout("pp2,dp_shard2"),
    dtype: "f32",
    normType: 2,
    regime: "finalize",
    seed: 3,
    params: [{ name: "emb", shape: [4], stage: 0, ...copy, replicas: [{ stage: 1, ...copy }] }],
    ...more,
  };
}

let files = 0;
/** Replays a case in a fresh worker (`cell --file`'s road): a subject's module state starts anew. */
async function replay(c: FuzzCase): Promise<Replay> {
  const path = join(dir, `case-${files++}.json`);
  writeFileSync(path, caseToFile(c));
  const o = await runOneJob({ index: 0, kind: REPLAY_JOB.name, module: REPLAY_JOB.module, input: { path }, deadlineMs: 60_000 });
  expect(o.fault).toBeNull();
  return o.result as Replay;
}

const ids = (r: Replay) => r.outcome.violations.map((v) => v.id);

describe("fuzz cases for optimizer-owned subjects", () => {
  const cases = fc.sample(caseArb({ subject: "titan-mtp", shape: "optimizer" }), { seed: SEED, numRuns: 1000 });

  it("cover the finalize regime, shared tie stages and training cases, each in at least 5% of 1000 cases", () => {
    const counts = optimizerCoverage(cases);
    for (const f of OPTIMIZER_FEATURES) expect(counts[f], f).toBeGreaterThanOrEqual(50);
  });

  it("are valid, runnable by an optimizer-owned subject, and round-trip through a replay file", () => {
    for (const c of cases.slice(0, 200)) {
      expect(() => checkOptimizerCase(c)).not.toThrow();
      expect(caseFromFile(caseToFile(c), "test")).toEqual(validateCase(c));
    }
  });

  it("refuse what an optimizer-owned subject cannot finalize, naming the field and the value", () => {
    const base = tiedCase("titan-mtp");
    const moved = structuredClone(base);
    moved.params[0]!.replicas[0]!.placements = [Replicate];
    expect(() => checkOptimizerCase(moved)).toThrow(InputError);
    expect(() => checkOptimizerCase(moved)).toThrow(/params\[0\] \(emb\) replicas\[0\]: placed on s1:dense\[dp_shard=R\]/);
    expect(() => validateCase({ ...base, steps: 0 })).toThrow(/steps: 0 must be an integer in \[1, 10\]/);
    expect(() => validateCase({ ...base, steps: 2, maxNorm: 1 })).toThrow(/maxNorm: 1 cannot be given with steps/);
  });
});

describe("fuzzing optimizer-owned subjects (in a worker)", () => {
  it("titan-mtp holds every property on 300 cases, training cases included", { timeout: 120_000 }, async () => {
    const { result, fault } = await fuzzIsolated({ subject: "titan-mtp", params: { seed: SEED, numRuns: 300, outDir: dir } });
    expect(fault).toBeNull();
    expect(result!.counterexample?.message).toBeUndefined();
    expect(result!.numRuns).toBe(300);
  });

  for (const [subject, targets] of KNOWN_BAD) {
    it(`${subject.replace(`${STRENGTH}/`, "")}: caught by ${targets.join(" or ")} within ${SELF_TEST_RUNS} cases`, { timeout: 120_000 }, async () => {
      const { result, fault } = await fuzzIsolated({ subject, params: { seed: SEED, numRuns: SELF_TEST_RUNS, targets, outDir: dir, subjectSpec: subject } });
      expect(fault).toBeNull();
      const ce = result!.counterexample;
      expect(ce, `no case of ${SELF_TEST_RUNS} failed ${targets.join(" or ")}`).toBeDefined();
      for (const v of ce!.violations) expect(targets).toContain(v.id);
    });
  }
});

describe("what the fuzzer's optimizer cases pin down", () => {
  it("comm.budget allows one finalize per tied parameter: titan-mtp uses exactly that on two tied params over one set of ranks", { timeout: 60_000 }, async () => {
    const c = tiedCase("titan-mtp");
    c.params.push({ ...structuredClone(c.params[0]!), name: "head", replicas: structuredClone(c.params[0]!.replicas) });
    const r = await replay(c);
    expect(ids(r)).toEqual([]);
    if (!("result" in r.outcome)) throw new Error("a clip case");
    // stage 0: 1 reduction group (dp_shard) + 1 (pp) + 2 tied parameters = the budget, which a count of
    // one finalize per set of ranks (3) would fail; stage 1 holds only replicas, which never count in the norm
    expect(r.outcome.result.comm.map((x) => x.calls)).toEqual([4, 4, 3, 3]);
    expect(r.outcome.result.checks.find((x) => x.id === "comm.budget")?.status).toBe("pass");
  });

  it("outside finalize a tied gradient's -0 survives the finalize sum: an f16 -0 (inactive) stays -0", { timeout: 60_000 }, async () => {
    // emb's element 14 is a negative value that underflows to -0 in f16; the replica's partial is -0
    // (gen mode neg-zeros) and the tensor all_reduce sums from -0, so canonical + partial is the gradient bitwise
    const c = tiedCase("titan-mtp", { layout: parseLayout("pp2"), dtype: "f16", regime: "inactive", seed: 0 });
    c.params = [{ name: "emb", shape: [64], stage: 0, mesh: "dense", axes: ["tp"], placements: [Replicate], replicas: [{ stage: 1, mesh: "dense", axes: ["tp"], placements: [Replicate] }] }];
    expect(ids(await replay(c))).toEqual([]);
  });

  it("a bug in the init sync shows only in a training case: init-from-last-stage and init-unsynced pass the clip, fail at step 0", { timeout: 60_000 }, async () => {
    for (const subject of [`${STRENGTH}/init-from-last-stage.ts`, "init-unsynced"]) {
      expect(ids(await replay(tiedCase(subject))), subject).toEqual([]);
      const trained = await replay(tiedCase(subject, { steps: 2 }));
      expect(ids(trained), subject).toEqual(["train.parity"]);
      expect(trained.outcome.violations[0]!.message).toMatch(/^step 0 \(the initial state/);
    }
    expect(ids(await replay(tiedCase("titan-mtp", { steps: 3 })))).toEqual([]);
  });

  it("a bug from step 2 on shows only in a training case of 2+ steps: finalize-once", { timeout: 60_000 }, async () => {
    const subject = `${STRENGTH}/finalize-once.ts`;
    expect(ids(await replay(tiedCase(subject)))).toEqual([]);
    expect(ids(await replay(tiedCase(subject, { steps: 1 })))).toEqual([]);
    const two = await replay(tiedCase(subject, { steps: 2 }));
    expect(ids(two)).toEqual(["train.parity"]);
    expect(two.outcome.violations[0]!.message).toMatch(/^step 2: /);
  });
});

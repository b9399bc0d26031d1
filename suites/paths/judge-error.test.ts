/**
 * Issue 57: the judge's error path, a throw between an allocation and its free. The judge allocates in the cell's
 * store (shared with its thread by ticket): a --dump's full gradients and reference (harness/judge/dump.ts, freed
 * after the three safetensors files are written) and the scratch block of a cross-layout state comparison
 * (harness/judge/state-compare.ts, freed after the compare). When the step in between throws, the judge thread's
 * `finally { backend.freeAll() }` (harness/judge/judge-worker.ts) frees them: the cell's ledger is back at zero and
 * the error the caller sees is the one that was thrown, not runCell's "ledger not zero". In the main thread's judge
 * (in place, the cell's own backend) runCell's freeAll does it. No test made that step throw before.
 *
 * Kept weakening (suites/weakenings): judge-thread-no-free-on-error.patch (no freeAll in the judge thread) fails
 * "in the judge's thread: a dump that cannot be written" and "in the judge's thread: a state comparison that throws".
 */
import { afterAll, describe, expect, it } from "vitest";
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCell } from "../../harness/execute/cell.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { installJudge, startJudgeThread, currentJudge } from "../../harness/judge/client.ts";
import { sharedState } from "../../harness/judge/states.ts";
import { Backend } from "../../harness/backend/backend.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { freeState, initState, type TrainConfig } from "../../harness/training/train.ts";
import { fuzzManifest, fuzzPlan, singleRankPlan } from "../../harness/fuzz/case.ts";
import { SHARDED_CASE } from "./sharded-case.ts";
import { testCell } from "../checks-branches/subjects.ts";

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A --dump folder whose first file cannot be written: a folder stands where grads.safetensors goes. */
function unwritableDump(): string {
  const d = mkdtempSync(join(tmpdir(), "cp-judge-error-"));
  dirs.push(d);
  mkdirSync(join(d, "grads.safetensors"));
  return d;
}

/** A cell whose judge dumps its tensors: the dump allocates, then fails to write. */
async function dumpThatFails(): Promise<Error> {
  const dir = unwritableDump();
  const err = await runCell(testCell(), { subject: BUILTIN_SUBJECTS.bucketed!, dumpDir: dir }).then(
    () => null,
    (e: unknown) => e as Error,
  );
  expect(err, "the cell's dump should have failed").toBeInstanceOf(Error);
  expect(readdirSync(dir)).toEqual(["grads.safetensors"]);
  return err!;
}

const shardedCase = SHARDED_CASE;

/**
 * A cross-layout comparison whose expected state is missing rank 1's copies: the judge allocates the scratch block of
 * the single rank's copy, assembles half of it, and throws before freeing it. Returns the error and the ledger after.
 */
async function comparisonThatThrows(): Promise<{ err: Error; live: number; freed: number; after: number }> {
  const model = fuzzManifest(shardedCase);
  const cfg: TrainConfig = { subject: BUILTIN_SUBJECTS.exact!, model, dtype: "f32", normType: 2, regime: "active", seed: 0 };
  const backend = new Backend("cpu", 2);
  const sharded = initState(backend, parseLayout("dp_shard2"), cfg, fuzzPlan(shardedCase));
  const single = initState(backend, parseLayout("single"), cfg, singleRankPlan(shardedCase));
  const expected = sharedState(sharded);
  expected.ranks = [expected.ranks[0]!, []];
  const err = await currentJudge()
    .states({ backend: "cpu", ranks: 2, states: [expected, sharedState(single)], tied: [], pairs: [{ expected: 0, actual: 1, limit: 1 }] }, backend)
    .then(
      () => null,
      (e: unknown) => e as Error,
    );
  freeState(backend, sharded);
  freeState(backend, single);
  const live = backend.liveBytes(0) + backend.liveBytes(1);
  const freed = backend.freeAll();
  const after = backend.liveBytes(0) + backend.liveBytes(1);
  expect(err, "the comparison should have thrown").toBeInstanceOf(Error);
  return { err: err!, live, freed, after };
}

const WRITE_FAILED = /^safetensors \S+\/grads\.safetensors: cannot write: /;
const HALF_COVERED = /^internal: the uninterrupted run covers 4 of 8 elements of w on rank 0$/;

// in place first: a thread's judge, once installed, is its judge for good
describe("the judge in place (the main thread): a throw between an allocation and its free", () => {
  it("a dump that cannot be written: the write's error, and the cell's ledger back at zero", { timeout: 60_000 }, async () => {
    const err = await dumpThatFails();
    expect(err.message).toMatch(WRITE_FAILED);
    expect(err.message).not.toMatch(/ledger not zero/);
  });

  it("a state comparison that throws: its error, and nothing of the judge's left in the store", async () => {
    const { err, live, freed, after } = await comparisonThatThrows();
    expect(err.message).toMatch(HALF_COVERED);
    // in place the judge allocates on the caller's own handle: its scratch block (8 float32) is the caller's to free,
    // as runTrain's and runResume's freeAll do
    expect([live, freed, after]).toEqual([32, 1, 0]);
  });
});

describe("the judge in its own thread (a cell worker's): a throw between an allocation and its free", () => {
  it("installs the judge thread", () => {
    installJudge(startJudgeThread());
  });

  it("in the judge's thread: a dump that cannot be written: the write's error, not 'ledger not zero'", { timeout: 60_000 }, async () => {
    const err = await dumpThatFails();
    expect(err.message).toMatch(WRITE_FAILED);
    expect(err.message).not.toMatch(/ledger not zero/);
  });

  it("in the judge's thread: a state comparison that throws leaves nothing of the judge's in the store", async () => {
    const { err, live, freed } = await comparisonThatThrows();
    expect(err.message).toMatch(HALF_COVERED);
    expect([live, freed]).toEqual([0, 0]);
  });

  it("the thread still judges afterwards: a cell passes", { timeout: 60_000 }, async () => {
    const r = await runCell(testCell(), { subject: BUILTIN_SUBJECTS.bucketed! });
    expect(r.checks.filter((c) => c.status === "fail")).toEqual([]);
  });
});

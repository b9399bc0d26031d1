/**
 * Issue 42: one test per branch of every check, each branch named as its module's BRANCHES declares it.
 * The subjects (./subjects.ts) go wrong where a check skips, tolerates or judges part of the ranks: on
 * a rank other than 0, by an ulp, on the error path, on one tied replica of several. Each test was
 * seen to fail with its branch weakened in the check (the commits say how).
 */
import { describe, expect, it } from "vitest";
import { parseLayout } from "../../harness/layout/layout.ts";
import { runCell, type RunCellOptions } from "../../harness/execute/cell.ts";
import type { Cell } from "../../harness/cell/cell.ts";
import type { CellResult } from "../../harness/results/types.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { NORM_TOLERANCE } from "../../harness/checks/types.ts";
import { Replicate, Shard } from "../../harness/model/plan.ts";
import { fuzzCell, fuzzManifest, fuzzPlan, validateCase, type FuzzCase, type FuzzCopy } from "../../harness/fuzz/case.ts";
import { isolationCheck } from "../../harness/checks/isolation.ts";
import { goldenCheck } from "../../harness/checks/golden.ts";
import * as parityNorm from "../../harness/checks/parity-norm.ts";
import * as parityRanks from "../../harness/checks/parity-ranks.ts";
import * as parityTensors from "../../harness/checks/parity-tensors.ts";
import * as scalingNonempty from "../../harness/checks/scaling-nonempty.ts";
import * as scalingReplicas from "../../harness/checks/scaling-replicas.ts";
import * as liveness from "../../harness/checks/liveness.ts";
import * as errorsNonfinite from "../../harness/checks/errors-nonfinite.ts";
import * as errorsRaised from "../../harness/checks/errors-raised.ts";
import * as memoryPeak from "../../harness/checks/memory-peak.ts";
import * as memoryLeak from "../../harness/checks/memory-leak.ts";
import * as commBudget from "../../harness/checks/comm-budget.ts";
import * as commReach from "../../harness/checks/comm-reach.ts";
import type { CheckContext } from "../../harness/checks/types.ts";
import type { RankContext } from "../../harness/subject/api.ts";
import { CHECKS, RUN_CHECKS } from "../../harness/checks/index.ts";
import * as isolation from "../../harness/checks/isolation.ts";
import * as golden from "../../harness/checks/golden.ts";
import { coefInGradDtype } from "../strength/subjects/coef-in-grad-dtype.ts";
import {
  bucketedWith,
  leaksOnErrorPathOnRank1,
  nextUp32,
  raisesAfterCollectivesOnRank1,
  raisesAtOnce,
  raisesBeforePp,
  raisesOnRank0Only,
  rank1RaisesUnrelated,
  replicaNeverTouched,
  replicaUnscaledOnStage,
  reportsEverywhere,
  reportsOn,
  scalesOnRank,
  scratchOnRank1,
  sideChannelToRank1,
  skipsPpOnRank1,
  testCell,
  ulpUpScaledByIt,
} from "./subjects.ts";

const bucketed = BUILTIN_SUBJECTS.bucketed!;
const titanMtp = BUILTIN_SUBJECTS["titan-mtp"]!;

const pp2 = { layout: parseLayout("pp2") };
const nan = { regime: "nonfinite-nan" } as const;

async function verdict(id: string, subject: RunCellOptions["subject"], over: Partial<Cell> = {}, options: Partial<RunCellOptions> = {}) {
  const r = await runCell(testCell(over), { subject, ...options });
  return { ...r.checks.find((c) => c.id === id)!, result: r };
}

const check = (r: CellResult, id: string) => r.checks.find((c) => c.id === id)!;
/** A value check's skip when a rank raised: the rank and its error, so that the report says why. */
const RANK_1_RAISED = { status: "skip", message: "rank 1 raised: rank 1 failed after its collectives" };

// ---- tied replicas on a synthetic model (the fuzzer's case format) ------------------------------

const copy = (stage: number, axes: FuzzCopy["axes"] = [], placements: FuzzCopy["placements"] = []): FuzzCopy => ({ stage, mesh: "dense", axes, placements });

/** pp3: a weight on stage 0 tied to a replica on stage 1 and one on stage 2, placed alike; an untied one beside it. */
const threeStages: FuzzCase = validateCase({
  subject: "x",
  layout: parseLayout("pp3"),
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  params: [
    { name: "embed", shape: [4, 2], ...copy(0), replicas: [copy(1), copy(2)] },
    { name: "w", shape: [3], ...copy(1), replicas: [] },
  ],
});

/** pp2,dp_shard2: a weight sharded over dp_shard on stage 0, its replica on stage 1 whole: no shard lines up. */
const misaligned: FuzzCase = validateCase({
  subject: "x",
  layout: parseLayout("pp2,dp_shard2"),
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  params: [{ name: "embed", shape: [4, 2], ...copy(0, ["dp_shard"], [Shard(0)]), replicas: [copy(1, ["dp_shard"], [Replicate])] }],
});

/** pp2: a tied weight as trainers tie it (replica on the last stage, placed alike), for an optimizer-owned clipper. */
const optimizerTied: FuzzCase = validateCase({
  subject: "x",
  layout: parseLayout("pp2"),
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  params: [{ name: "embed", shape: [4, 2], ...copy(0), replicas: [copy(1)] }],
});

/** bucketed, plus one all_reduce of its total over the rank's tp group on the ranks `on` picks (a clip that reduces twice). */
const extraTpCollective = (on: (rank: RankContext) => boolean) =>
  bucketedWith("extra-tp-collective", {
    reduceOverPp: async (rank, stageTotal, op) => {
      const total = await rank.allReduce(rank.group("pp"), stageTotal, op);
      return on(rank) ? rank.allReduce(rank.group("tp"), total, "max") : total;
    },
  });

async function onCase(c: FuzzCase, subject: RunCellOptions["subject"], id: string) {
  const r = await runCell(fuzzCell(c), { subject, model: fuzzManifest(c), plan: fuzzPlan(c) });
  return check(r, id);
}

// ---- the tests, by check and branch ---------------------------------------------------------------

type BranchTests = Record<string, () => Promise<void> | void>;

const TESTS: Record<string, { branches: readonly string[]; tests: BranchTests }> = {
  "parity.norm": {
    branches: parityNorm.BRANCHES,
    tests: {
      "skip: the meta backend holds no values": async () => {
        expect(await verdict("parity.norm", bucketed, {}, { backend: "meta" })).toMatchObject({ status: "skip", message: "the meta backend holds no values" });
      },
      "skip: liveness failed": async () => {
        const r = await verdict("parity.norm", skipsPpOnRank1, pp2);
        expect(check(r.result, "liveness").status).toBe("fail");
        expect(r).toMatchObject({ status: "skip", message: "liveness failed" });
      },
      "skip: a rank other than 0 raised on a cell that asks for no error (errors.raised reports it)": async () => {
        // rank 0 returned the right norm: the raise alone must not read as a wrong norm, nor pass
        const r = await verdict("parity.norm", raisesAfterCollectivesOnRank1);
        expect(r).toMatchObject({ status: "skip", message: "rank 1 raised (errors.raised)" });
        expect(check(r.result, "errors.raised").status).toBe("fail");
      },
      "tolerate: every rank raised for a non-finite norm it was asked to refuse": async () => {
        const r = await verdict("parity.norm", bucketed, nan);
        expect(r.status).toBe("pass");
      },
      "fail: a rank returned something other than a number": async () => {
        const r = await verdict("parity.norm", reportsOn("returns-undefined-on-rank-1", 1, () => undefined));
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1 returned undefined, not a number\n/);
      },
      "fail: a norm that is not a float32 value": async () => {
        const r = await verdict("parity.norm", reportsOn("float64-on-rank-1", 1, (n) => n * (1 + 2 ** -40)));
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1 returned [\d.]+, which is not a float32 value/);
      },
      "fail: outside the tolerance on a rank other than 0": async () => {
        const off = (n: number) => Math.fround(n * (1 + 1.5 * NORM_TOLERANCE.fp32));
        const r = await verdict("parity.norm", reportsOn("off-on-rank-1", 1, off));
        expect(Math.abs(off(r.result.referenceNorm) - r.result.referenceNorm) / r.result.referenceNorm).toBeLessThan(2 * NORM_TOLERANCE.fp32);
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1: total norm .* != reference/);
      },
      "pass: within the tolerance (an ulp off under fp32)": async () => {
        const r = await verdict("parity.norm", reportsEverywhere("ulp-up", nextUp32));
        expect(r.result.totalNorm).not.toBe(r.result.referenceNorm);
        expect(r.status).toBe("pass");
      },
      "exact class: an ulp off fails": async () => {
        const r = await verdict("parity.norm", reportsEverywhere("ulp-up-exact", nextUp32, "exact"));
        expect(r.status).toBe("fail");
      },
      "non-finite reference: compared bitwise (Inf is not NaN)": async () => {
        const inf = { regime: "nonfinite-inf", errorIfNonfinite: false } as const;
        expect((await verdict("parity.norm", bucketed, inf)).status).toBe("pass");
        const r = await verdict("parity.norm", reportsEverywhere("nan-for-inf", () => NaN), inf);
        expect(r.status).toBe("fail");
      },
    },
  },
  "parity.ranks": {
    branches: parityRanks.BRANCHES,
    tests: {
      "skip: a rank raised": async () => {
        expect(await verdict("parity.ranks", raisesAfterCollectivesOnRank1)).toMatchObject(RANK_1_RAISED);
      },
      "fail: ranks an ulp apart, each within the norm's tolerance": async () => {
        const r = await verdict("parity.ranks", reportsOn("ulp-up-on-rank-1", 1, nextUp32));
        expect(check(r.result, "parity.norm").status).toBe("pass");
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1 returned .* but rank 0 returned/);
      },
      "pass: every rank NaN (NaN equals NaN)": async () => {
        const r = await verdict("parity.ranks", bucketed, { ...nan, errorIfNonfinite: false });
        expect(r.result.totalNorm).toBeNaN();
        expect(r.status).toBe("pass");
      },
    },
  },
  "parity.tensors": {
    branches: parityTensors.BRANCHES,
    tests: {
      "skip: a rank raised": async () => {
        expect(await verdict("parity.tensors", raisesAfterCollectivesOnRank1)).toMatchObject(RANK_1_RAISED);
      },
      "fail: a gradient off on a rank other than 0": async () => {
        const r = await verdict("parity.tensors", scalesOnRank("coef-off-on-rank-1", 1, (c) => Math.fround(c * (1 + 2 ** -20))));
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1, /);
      },
      "exact class: judged by the reference's coefficient, not the rank's own norm": async () => {
        // an ulp-up norm, scaled by its own coefficient: consistent, so fp32 passes it; exact does not
        expect((await verdict("parity.tensors", ulpUpScaledByIt("fp32"))).status).toBe("pass");
        expect((await verdict("parity.tensors", ulpUpScaledByIt("exact"))).status).toBe("fail");
      },
      "bf16 class: a coefficient held in the gradients' dtype is accepted there only": async () => {
        const bf16 = { dtype: "bf16" } as const;
        expect((await verdict("parity.tensors", coefInGradDtype(), bf16)).status).toBe("pass");
        expect((await verdict("parity.tensors", { ...coefInGradDtype(), tolerance: "fp32" }, bf16)).status).toBe("fail");
      },
      "pass: every gradient scaled by its rank's coefficient": async () => {
        expect((await verdict("parity.tensors", bucketed)).status).toBe("pass");
      },
    },
  },
  "scaling.nonempty": {
    branches: scalingNonempty.BRANCHES,
    tests: {
      "skip: a rank raised": async () => {
        expect(await verdict("scaling.nonempty", raisesAfterCollectivesOnRank1)).toMatchObject(RANK_1_RAISED);
      },
      "skip: clip_coef >= 1, nothing to scale": async () => {
        expect(await verdict("scaling.nonempty", bucketed, { regime: "inactive" })).toMatchObject({ status: "skip", message: "clip_coef is 1: nothing to scale" });
      },
      "fail: gradients left unscaled on a rank other than 0": async () => {
        const r = await verdict("scaling.nonempty", scalesOnRank("unscaled-on-rank-1", 1, () => null));
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1, .*: the gradient was not scaled/);
      },
      "fail: an optimizer's tied copy left as the raw partial it was given": async () => {
        const r = await onCase({ ...optimizerTied, regime: "finalize", maxNorm: 0.01 }, replicaNeverTouched, "scaling.nonempty");
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1, .*: the gradient was not scaled/);
      },
      "pass: every gradient scaled": async () => {
        expect((await verdict("scaling.nonempty", bucketed)).status).toBe("pass");
      },
    },
  },
  "scaling.replicas": {
    branches: scalingReplicas.BRANCHES,
    tests: {
      "skip: a rank raised": async () => {
        expect(await onCase(threeStages, raisesAfterCollectivesOnRank1, "scaling.replicas")).toMatchObject(RANK_1_RAISED);
      },
      "skip: no tied replica": async () => {
        expect(await verdict("scaling.replicas", bucketed)).toMatchObject({ status: "skip", message: "no tied replica in this cell" });
      },
      "fail: one replica of several left unscaled, on the middle stage": async () => {
        const r = await onCase(threeStages, replicaUnscaledOnStage(1), "scaling.replicas");
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1, replica /);
      },
      "fail: one replica of several left unscaled, on the last stage": async () => {
        const r = await onCase(threeStages, replicaUnscaledOnStage(2), "scaling.replicas");
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 2, replica /);
      },
      "fail: a replica whose shards line up with no canonical shard, left unscaled": async () => {
        const r = await onCase(misaligned, replicaUnscaledOnStage(1), "scaling.replicas");
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank [23], replica .*\(scaled by [\d.e-]+ like its canonical copy\)/);
      },
      "pass: every replica scaled like its canonical copy": async () => {
        const r = await onCase(threeStages, bucketed, "scaling.replicas");
        expect(r).toMatchObject({ status: "pass", message: "2 replica shards" });
        expect((await onCase(misaligned, bucketed, "scaling.replicas")).status).toBe("pass");
      },
    },
  },
  liveness: {
    branches: liveness.BRANCHES,
    tests: {
      "fail: a rank skipped a collective the others wait in": async () => {
        const r = await verdict("liveness", skipsPpOnRank1, pp2);
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/rank 1 returned without calling it/);
      },
      "pass: every collective completed": async () => {
        expect((await verdict("liveness", bucketed, pp2)).status).toBe("pass");
      },
    },
  },
  "errors.nonfinite": {
    branches: errorsNonfinite.BRANCHES,
    tests: {
      "skip: the meta backend holds no values": async () => {
        expect(await verdict("errors.nonfinite", bucketed, nan, { backend: "meta" })).toMatchObject({ status: "skip", message: "the meta backend holds no values" });
      },
      "skip: the cell asks for no error (finite norm)": async () => {
        const notAsked = { status: "skip", message: "the cell does not ask for an error on a non-finite norm" };
        expect(await verdict("errors.nonfinite", bucketed)).toMatchObject(notAsked);
        expect(await verdict("errors.nonfinite", bucketed, { ...nan, errorIfNonfinite: false })).toMatchObject(notAsked);
      },
      "fail: a hang instead of an error": async () => {
        const r = await verdict("errors.nonfinite", raisesBeforePp, { ...pp2, ...nan });
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^a non-finite norm led to a hang instead of an error/);
      },
      "fail: some ranks raised while the others returned NaN": async () => {
        const r = await verdict("errors.nonfinite", raisesOnRank0Only, nan);
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^the norm is NaN but rank\(s\) 1 returned NaN instead of raising/);
      },
      "fail: a rank other than 0 raised an unrelated error": async () => {
        const r = await verdict("errors.nonfinite", rank1RaisesUnrelated, nan);
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1 raised, but not for the non-finite norm: cannot format the error/);
      },
      "pass: every rank raised the non-finite error": async () => {
        expect(await verdict("errors.nonfinite", bucketed, nan)).toMatchObject({ status: "pass", message: "raised on all 2 ranks" });
      },
    },
  },
  "errors.raised": {
    branches: errorsRaised.BRANCHES,
    tests: {
      "tolerate: a raise on a cell that asks for the non-finite error": async () => {
        // which error it was is errors.nonfinite's to judge: it fails this one, errors.raised does not
        const r = await verdict("errors.raised", rank1RaisesUnrelated, nan);
        expect(check(r.result, "errors.nonfinite").status).toBe("fail");
        expect(r).toMatchObject({ status: "pass", message: "the cell asks for an error (errors.nonfinite judges it)" });
      },
      "fail: a rank other than 0 raised on a cell that asks for no error": async () => {
        const r = await verdict("errors.raised", raisesAfterCollectivesOnRank1);
        expect(r.status).toBe("fail");
        expect(r.severity).toBe("correctness");
        expect(r.message).toMatch(/^rank 1 raised on a cell that asks for no error \(reference norm [\d.]+, error_if_nonfinite false\): rank 1 failed after its collectives\n/);
        // a non-finite norm the cell asked to be returned (error_if_nonfinite false) is no reason to raise either
        const all = await verdict("errors.raised", raisesAtOnce, { ...nan, errorIfNonfinite: false });
        expect(all.message).toMatch(/^rank 0 raised on a cell that asks for no error \(reference norm NaN, error_if_nonfinite false\) \(ranks 0, 1 raised\): raised before any collective/);
      },
      "pass: no rank raised": async () => {
        expect(await verdict("errors.raised", bucketed)).toMatchObject({ status: "pass", message: "" });
      },
    },
  },
  "memory.peak": {
    branches: memoryPeak.BRANCHES,
    tests: {
      "fail: scratch over budget on a rank other than 0": async () => {
        const r = await verdict("memory.peak", scratchOnRank1(4 << 20));
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1: scratch peak 4,194,304 bytes during the clip > budget/);
      },
      "pass: scratch within budget": async () => {
        expect((await verdict("memory.peak", scratchOnRank1(1 << 10))).status).toBe("pass");
      },
    },
  },
  "memory.leak": {
    branches: memoryLeak.BRANCHES,
    tests: {
      "skip: liveness failed": async () => {
        expect(await verdict("memory.leak", skipsPpOnRank1, pp2)).toMatchObject({ status: "skip", message: "liveness failed: aborted ranks could not free their tensors" });
      },
      "fail: a leak on the error path only, on a rank other than 0": async () => {
        expect((await verdict("memory.leak", leaksOnErrorPathOnRank1)).status).toBe("pass");
        const r = await verdict("memory.leak", leaksOnErrorPathOnRank1, nan);
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1: [\d,]+ bytes still allocated after the clip/);
      },
      "pass: nothing left allocated": async () => {
        expect((await verdict("memory.leak", bucketed, nan)).status).toBe("pass");
      },
    },
  },
  "comm.budget": {
    branches: commBudget.BRANCHES,
    tests: {
      "fail: a collective over budget on a rank other than 0": async () => {
        // dp_shard2,tp2: ranks 2 and 3 (dp_shard 1) add an all_reduce over their tp group; ranks 0 and 1 do not
        const r = await verdict("comm.budget", extraTpCollective((rank) => rank.coords.dp_shard === 1), { layout: parseLayout("dp_shard2,tp2") });
        expect(r.status).toBe("fail");
        expect(r.severity).toBe("performance");
        // what each collective reduced over, the budget's groups and the fused alternative
        expect(r.message).toMatch(
          /^rank 2 issued 4 collectives, 3 of them across ranks \(4 all_reduce; 1 over \{2\} \(local: not counted\), 1 over \{0,1,2,3\}, 1 over \{0,2\}, 1 over \{2,3\}\) in one clip; budget 2 = 2 distinct reduction groups \(\{0,1,2,3\} \(dp_shard×tp\), \{0,2\} \(dp_shard\)\); fused: one all_reduce over \{0,1,2,3\} \(dp_shard×tp\), one all_reduce over \{0,2\} \(dp_shard\)\n/,
        );
      },
      "budget: no pipeline, no PP reduction: one collective per reduction group": async () => {
        // tp2 at pp = 1: the sharded weights' group {0,1} and nothing for a PP reduction (SPEC §10's "+ 1 (PP)"
        // exists with PP only); a clip with one all_reduce more than its groups goes over
        const r = await verdict("comm.budget", extraTpCollective(() => true), { layout: parseLayout("tp2") });
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/ budget 1 = 1 distinct reduction group \(\{0,1\} \(tp\)\); fused: one all_reduce over \{0,1\} \(tp\)\n/);
        expect((await verdict("comm.budget", bucketed, { layout: parseLayout("tp2") })).message).toBe("at most 1 collectives across ranks per rank");
      },
      "budget: a collective over a group of one rank is not counted": async () => {
        // one rank: bucketed's reductions (over its own rank, the PP reduction of a one-stage pipeline) reach no one
        const r = await verdict("comm.budget", bucketed, { layout: parseLayout("single") });
        expect(r.result.comm[0]!.calls).toBeGreaterThan(0);
        expect(r).toMatchObject({ status: "pass", message: "at most 0 collectives across ranks per rank" });
      },
      "budget: a Partial gradient's sum is one more": async () => {
        const r = await verdict("comm.budget", bucketed, { layout: parseLayout("tp2"), model: "llama3-debug-sp" });
        expect(r.status).toBe("pass");
        expect(check(r.result, "parity.norm").status).toBe("pass");
      },
      "budget: an optimizer-owned clipper's finalize of a tied parameter is one more": async () => {
        expect((await onCase(optimizerTied, titanMtp, "comm.budget")).status).toBe("pass");
      },
      "budget: the matrix's own budget replaces the rule": async () => {
        const r = await verdict("comm.budget", bucketed, {}, { budgets: { collectives: 0 } });
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/budget 0 = the matrix's budget\n/);
      },
      "pass: within budget": async () => {
        expect((await verdict("comm.budget", bucketed, pp2)).status).toBe("pass");
      },
    },
  },
  "comm.reach": {
    branches: commReach.BRANCHES,
    tests: {
      "skip: no reach reported (an external runtime)": () => {
        expect(commReach.default.judge({ reach: null } as unknown as CheckContext)).toMatchObject({ status: "skip", message: "the subject's runtime reports no collectives' reach (an external runtime)" });
      },
      "skip: the meta backend holds no values": async () => {
        expect(await verdict("comm.reach", bucketed, {}, { backend: "meta" })).toMatchObject({ status: "skip", message: "a meta cell holds no values to know" });
      },
      "fail: a rank other than 0 returned a norm its collectives could not have told it": async () => {
        const r = await verdict("comm.reach", sideChannelToRank1(), pp2);
        expect(check(r.result, "parity.norm").status).toBe("pass");
        expect(r.status).toBe("fail");
        expect(r.message).toMatch(/^rank 1 returned a norm \([\d.]+\), but the collectives it completed joined it only to ranks \[1\]/);
      },
      "tolerate: a rank that raised is not judged": async () => {
        expect((await verdict("comm.reach", raisesAtOnce, pp2)).status).toBe("pass");
      },
      "tolerate: ranks that hold every element need no collective": async () => {
        // every gradient is Replicate over dp_replicate: bucketed reduces over groups of one rank, joining none
        expect((await verdict("comm.reach", bucketed, { layout: parseLayout("dp_replicate2") })).status).toBe("pass");
      },
      "pass: every rank's norm reached it": async () => {
        expect((await verdict("comm.reach", bucketed, pp2)).status).toBe("pass");
      },
    },
  },
  isolation: {
    branches: isolation.BRANCHES,
    tests: {
      "fail: the subject's code did not end cleanly, with the command that reruns it": () => {
        expect(isolationCheck("worker exited with code 3", "npx clip-parity cell ...")).toEqual({
          id: "isolation",
          status: "fail",
          message: "worker exited with code 3\n  reproduce: npx clip-parity cell ...",
        });
        expect(isolationCheck("worker exited with code 3").message).toBe("worker exited with code 3");
      },
      "pass: it ended cleanly": () => {
        expect(isolationCheck(null).status).toBe("pass");
      },
    },
  },
  golden: {
    branches: golden.BRANCHES,
    tests: {
      "fail: a drift from the golden file": () => {
        expect(goldenCheck("norm 1 != 2", true, "golden/cpu.json", "clip-parity 0.1").status).toBe("fail");
        expect(goldenCheck("norm 1 != 2", false, "golden/cpu.json", "clip-parity 0.1").message).toBe("drift from golden/cpu.json (clip-parity 0.1): norm 1 != 2");
      },
      "skip: the golden file has no entry for the cell": () => {
        expect(goldenCheck(null, false, "golden/cpu.json", "x")).toMatchObject({ status: "skip", message: "no entry in golden/cpu.json" });
      },
      "pass: equal to the golden file": () => {
        expect(goldenCheck(null, true, "golden/cpu.json", "x").status).toBe("pass");
      },
    },
  },
};

for (const [id, { tests }] of Object.entries(TESTS)) {
  describe(id, () => {
    for (const [branch, test] of Object.entries(tests)) it(branch, test);
  });
}

describe("every branch a check module declares has its test here", () => {
  it("every check has its branches here", () => {
    expect(Object.keys(TESTS).sort()).toEqual([...CHECKS, ...RUN_CHECKS].map((c) => c.id).sort());
  });

  for (const [id, { branches, tests }] of Object.entries(TESTS)) {
    it(id, () => expect(Object.keys(tests)).toEqual([...branches]));
  }
});

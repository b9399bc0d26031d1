/**
 * Running one fuzz case through the SAME cell runner, subjects and checks as the matrices (or, for a
 * training case, the same training loop as `clip-parity train`: train.ts), and judging the fuzz
 * properties on the result.
 *
 * Properties (each against the reference, as the checks compute it):
 * - every check of harness/checks passes or is skipped: parity.norm and parity.tensors within the
 *   subject's tolerance class (`exact` bitwise), parity.ranks, scaling.nonempty, scaling.replicas,
 *   liveness, errors.nonfinite, memory.peak (scratch within budget), memory.leak, comm.budget;
 * - `collectives.buckets`, for the bucketing subjects (bucketed, exact, titan-mtp): on every rank the
 *   number of all_reduce calls equals the number of distinct reduction groups of the copies that count
 *   in the norm on that rank (canonical copies with a gradient; a Partial axis is summed first, so only
 *   Shard axes reduce), plus one per Partial gradient summed over several ranks, plus one (pp), plus,
 *   for an optimizer-owned subject, one per tied parameter it finalizes (a copy with a gradient whose
 *   tie group spans more than the rank), and no other collective;
 * - `train.parity`, for a training case: every parameter, both AdamW moments and the step counts
 *   bitwise equal between tied copies and against one rank holding the whole model, after the init
 *   sync and after every step (exact subjects; others within their class: train-parity.ts).
 */
import type { Subject } from "../subject/api.ts";
import { CHECK_IDS } from "../checks/index.ts";
import { runCell } from "../execute/cell.ts";
import { type CellResult } from "../results/types.ts";
import type { LocalParam } from "../model/plan.ts";
import { TRAIN_CHECK } from "../training/train-parity.ts";
import { meshesOf, reductionGroup, summedOverPartial, tieGroup, type Meshes } from "../world/context.ts";
import { checkOptimizerCase, fuzzCell, fuzzManifest, fuzzPlan, type FuzzCase, type FuzzTrainOutcome, type RunCaseOptions, type Violation } from "./case.ts";
import { runFuzzTrain } from "./train.ts";

/** Subjects that issue one all_reduce per reduction group (then one over pp, and one per tied parameter they finalize). */
export const BUCKETING_SUBJECTS: readonly string[] = ["bucketed", "exact", "titan-mtp"];

export const BUCKETS_PROPERTY = "collectives.buckets";

/** Every property id the fuzzer judges. */
export const PROPERTY_IDS: readonly string[] = [...CHECK_IDS, BUCKETS_PROPERTY, TRAIN_CHECK];

/** A clip case's outcome. */
export interface FuzzOutcome {
  result: CellResult;
  violations: Violation[];
}

/**
 * The scratch a fuzz case allows above the float32 size of a rank's largest local shard: the cases
 * hold a few hundred bytes, so the 1 MiB of a model cell would hide a copy of every gradient; a few
 * scalars' worth is what a correct subject needs beyond one shard.
 */
export const FUZZ_SCRATCH_SLACK_BYTES = 64;

/** Runs a clip case or a training case (`steps`), whichever it is. */
export async function runAnyCase(c: FuzzCase, subject: Subject, options: RunCaseOptions = {}): Promise<FuzzOutcome | FuzzTrainOutcome> {
  return c.steps === undefined ? runFuzzCase(c, subject, options) : runFuzzTrain(c, subject, options);
}

/** Runs a clip case (one cell); a training case goes to runAnyCase. */
export async function runFuzzCase(c: FuzzCase, subject: Subject, options: RunCaseOptions = {}): Promise<FuzzOutcome> {
  if (c.steps !== undefined) throw new Error("internal: runFuzzCase runs clip cases; a training case (steps) goes to runAnyCase");
  if (subject.shape === "optimizer") checkOptimizerCase(c);
  const model = fuzzManifest(c);
  const plan = fuzzPlan(c);
  const cell = fuzzCell(c);
  let grads: boolean[][] = [];
  const result = await runCell(cell, {
    subject,
    model,
    plan,
    repro: options.repro,
    timeoutMs: options.timeoutMs ?? 20_000,
    budgets: { scratchSlackBytes: FUZZ_SCRATCH_SLACK_BYTES },
    inspect: (ctx) => {
      grads = ctx.grads.map((row) => row.map((g) => g !== null));
    },
  });
  const violations: Violation[] = result.checks.filter((x) => x.status === "fail").map((x) => ({ id: x.id, message: x.message }));
  if (BUCKETING_SUBJECTS.includes(subject.name) && !result.liveness) {
    const wrong = bucketViolation(result, plan, grads, subject.shape === "optimizer");
    if (wrong) violations.push(wrong);
  }
  return { result, violations };
}

/** The all_reduce calls a bucketing subject must issue on `rank`: reduction groups, Partial sums, pp, finalized ties. */
function expectedCollectives(meshes: Meshes, plan: readonly LocalParam[][], rank: number, grads: boolean[][], finalizes: boolean) {
  const groups = new Set<string>();
  const tied = new Set<string>();
  let partialSums = 0;
  plan[rank]!.forEach((p, i) => {
    if (!grads[rank]?.[i]) return;
    if (p.canonical) {
      groups.add(reductionGroup(meshes, rank, p, p.placements.map((x) => x.kind === "shard")).key);
      if (summedOverPartial(meshes, rank, p)) partialSums++;
    }
    if (finalizes && p.tieGroup && tieGroup(plan, meshes, rank, p).ranks.length > 1) tied.add(p.name);
  });
  return { groups: groups.size, partialSums, tied: tied.size, want: groups.size + partialSums + 1 + tied.size };
}

function bucketViolation(result: CellResult, plan: readonly LocalParam[][], grads: boolean[][], finalizes: boolean): Violation | null {
  const meshes = meshesOf(result.cell.layout);
  for (const rank of plan.keys()) {
    const { groups, partialSums, tied, want } = expectedCollectives(meshes, plan, rank, grads, finalizes);
    const comm = result.comm[rank]!;
    if (comm.byKind.all_reduce.calls !== want || comm.calls !== want) {
      const ties = finalizes ? ` + ${tied} for the tied parameters it finalizes` : "";
      return {
        id: BUCKETS_PROPERTY,
        message:
          `rank ${rank} issued ${comm.byKind.all_reduce.calls} all_reduce (${comm.calls} collectives in all); ` +
          `it holds ${groups} distinct reduction groups and ${partialSums} Partial gradients to sum, so ${want} were expected (one per group and per Partial gradient + 1 for pp${ties})`,
      };
    }
  }
  return null;
}

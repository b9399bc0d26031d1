/**
 * Running one fuzz case through the SAME cell runner, subjects and checks as the matrices, and
 * judging the fuzz properties on the result.
 *
 * Properties (each against the reference, as the checks compute it):
 * - every check of harness/checks passes or is skipped: parity.norm and parity.tensors within the
 *   subject's tolerance class (`exact` bitwise), parity.ranks, scaling.nonempty, scaling.replicas,
 *   liveness, errors.nonfinite, memory.peak (scratch within budget), memory.leak, comm.budget;
 * - `collectives.buckets`, for the bucketing subjects (bucketed, exact): on every rank the number of
 *   all_reduce calls equals the number of distinct reduction groups of the copies that count in the
 *   norm on that rank (canonical copies with a gradient; a Partial axis is summed first, so only Shard
 *   axes reduce), plus one per Partial gradient summed over several ranks, plus one (pp), and no other collective.
 */
import type { Subject } from "../clip/api.ts";
import { CHECK_IDS } from "../checks/index.ts";
import { runCell } from "../run/cell.ts";
import { type CellResult } from "../results/types.ts";
import { meshesOf, reductionGroup, summedOverPartial } from "../world/context.ts";
import { fuzzCell, fuzzManifest, fuzzPlan, type FuzzCase } from "./case.ts";

/** Subjects that issue one all_reduce per reduction group (then one over pp). */
export const BUCKETING_SUBJECTS: readonly string[] = ["bucketed", "exact"];

export const BUCKETS_PROPERTY = "collectives.buckets";

/** Every property id the fuzzer judges. */
export const PROPERTY_IDS: readonly string[] = [...CHECK_IDS, BUCKETS_PROPERTY];

export interface Violation {
  id: string;
  message: string;
}

export interface FuzzOutcome {
  result: CellResult;
  violations: Violation[];
}

export interface RunCaseOptions {
  /** The command line the check messages print to reproduce the case. */
  repro?: string;
  timeoutMs?: number;
}

/**
 * The scratch a fuzz case allows above the float32 size of a rank's largest local shard: the cases
 * hold a few hundred bytes, so the 1 MiB of a model cell would hide a copy of every gradient; a few
 * scalars' worth is what a correct subject needs beyond one shard.
 */
export const FUZZ_SCRATCH_SLACK_BYTES = 64;

export async function runFuzzCase(c: FuzzCase, subject: Subject, options: RunCaseOptions = {}): Promise<FuzzOutcome> {
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
    const meshes = meshesOf(result.cell.layout);
    for (const [rank, params] of plan.entries()) {
      const groups = new Set<string>();
      let partialSums = 0;
      params.forEach((p, i) => {
        if (!p.canonical || !grads[rank]?.[i]) return;
        groups.add(reductionGroup(meshes, rank, p, p.placements.map((x) => x.kind === "shard")).key);
        if (summedOverPartial(meshes, rank, p)) partialSums++;
      });
      const comm = result.comm[rank]!;
      const want = groups.size + 1 + partialSums;
      if (comm.byKind.all_reduce.calls !== want || comm.calls !== want) {
        violations.push({
          id: BUCKETS_PROPERTY,
          message:
            `rank ${rank} issued ${comm.byKind.all_reduce.calls} all_reduce (${comm.calls} collectives in all); ` +
            `it holds ${groups.size} distinct reduction groups and ${partialSums} Partial gradients to sum, so ${want} were expected (one per group and per Partial gradient + 1 for pp)`,
        });
        break;
      }
    }
  }
  return { result, violations };
}

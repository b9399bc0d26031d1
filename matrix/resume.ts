/**
 * The `resume` section of the matrices (SPEC §9): checkpoint-resume cells, run by
 * suites/resume/matrix.test.ts (and by `clip-parity resume` one at a time).
 *
 * cpu: same-layout resume for every correct subject; cross-layout resume (resharding) for `exact`,
 * PP2/DP2/EP2 <-> PP4/EP1 and FSDP2xTP2 <-> TP4 among others; and the known-bad loaders, which drop
 * the optimizer step count or a tied copy on load, each on a cell where resume.equal must fail.
 * Kept fast: llama3-debug (6.2M params) where the model does not matter, deepseek-v3-debug (38.7M,
 * experts and a tied MTP embedding) with fewer steps where it does.
 */
import { CORRECT_SUBJECTS } from "../harness/registry/registry.ts";
import { parseLayout } from "../harness/layout/layout.ts";
import { resumeCellId, type ResumeCell } from "../harness/training/resume.ts";

export interface ResumeCase extends ResumeCell {
  /** "pass": resume.equal must pass; "fail": a known-bad loader it must catch. */
  expect: "pass" | "fail";
  /** Why the case is in the matrix. */
  note: string;
}

const LLAMA = "llama3-debug";
const DSV3 = "deepseek-v3-debug";

function rc(
  subject: string,
  layout: string,
  resumeLayout: string,
  model: string,
  steps: number,
  saveAt: number,
  note: string,
  extra: Partial<ResumeCase> = {},
): ResumeCase {
  return {
    subject,
    layout: parseLayout(layout),
    ...(resumeLayout !== layout ? { resumeLayout: parseLayout(resumeLayout) } : {}),
    model,
    dtype: "f32",
    normType: 2,
    regime: "active",
    seed: 0,
    steps,
    saveAt,
    expect: "pass",
    note,
    ...extra,
  };
}

function cpu(): ResumeCase[] {
  return [
    // same layout, every correct subject: PP x FSDP x TP on 8 ranks, bf16 gradients for one of them
    ...CORRECT_SUBJECTS.map((s, i) =>
      rc(s, "pp2,dp_shard2,tp2", "pp2,dp_shard2,tp2", LLAMA, 6, 3, "same layout, every correct subject", i % 2 ? { dtype: "bf16" } : {}),
    ),
    rc("exact", "pp2,dp_shard2,ep2", "pp2,dp_shard2,ep2", DSV3, 4, 2, "same layout with experts and a tied MTP embedding"),
    rc("titan", "dp_replicate2,dp_shard2", "dp_replicate2,dp_shard2", LLAMA, 6, 4, "HSDP: replicated blocks written once", { regime: "sparse" }),
    // resharding, exact
    rc("exact", "pp2,dp_shard2,ep2", "pp4", DSV3, 4, 2, "PP2/DP2/EP2 -> PP4/EP1 (the replica's stage moves)"),
    rc("exact", "pp4", "pp2,dp_shard2,ep2", DSV3, 4, 2, "PP4/EP1 -> PP2/DP2/EP2"),
    rc("exact", "dp_shard2,tp2", "tp4", DSV3, 4, 2, "FSDP2xTP2 -> TP4"),
    rc("exact", "tp4", "dp_shard2,tp2", LLAMA, 6, 3, "TP4 -> FSDP2xTP2"),
    rc("exact", "tp3", "dp_shard5", LLAMA, 6, 3, "uneven shards to other uneven shards"),
    rc("exact", "single", "pp2,dp_replicate2,tp2", LLAMA, 6, 2, "one rank to eight, replicated"),
    rc("exact", "pp2,dp_shard2,ep2", "single", DSV3, 3, 1, "four ranks to one: the tied replica and its canonical copy become one tensor; inf-norm", { normType: Infinity }),
    // finalize regime with the MTP replica (issue 15): each stage's tied copy holds its own partial,
    // per-stage init synced after init; PP2/DP2/EP2 <-> PP4/EP1, optimizer-owned titan-mtp and exact
    rc("titan-mtp", "pp2,dp_shard2,ep2", "pp4", DSV3, 4, 2, "finalize: PP2/DP2/EP2 -> PP4/EP1, optimizer-owned clipper, per-stage init", {
      regime: "finalize",
      init: "per-stage",
    }),
    rc("titan-mtp", "pp4", "pp2,dp_shard2,ep2", DSV3, 4, 2, "finalize: PP4/EP1 -> PP2/DP2/EP2, optimizer-owned clipper, per-stage init", {
      regime: "finalize",
      init: "per-stage",
    }),
    rc("exact", "pp2,dp_shard2,ep2", "pp4", DSV3, 4, 2, "finalize: PP2/DP2/EP2 -> PP4/EP1, harness-finalized gradients", { regime: "finalize", init: "per-stage", dtype: "bf16" }),
    // known-bad loaders: resume.equal must fail
    rc("exact", "pp2,tp2", "pp2,tp2", LLAMA, 6, 3, "known-bad loader: the optimizer step count is dropped", { loader: "drop-step", expect: "fail" }),
    rc("exact", "pp2,dp_shard2,ep2", "pp2,dp_shard2,ep2", DSV3, 4, 2, "known-bad loader: the tied MTP embedding replica is not loaded", {
      loader: "drop-tied",
      expect: "fail",
    }),
  ];
}

let sections: Record<string, ResumeCase[]> | undefined;

/** The resume section of each built-in matrix that has one. */
export function resumeSections(): Record<string, ResumeCase[]> {
  return (sections ??= { cpu: cpu() });
}

/** The resume cases of a matrix (empty for a matrix without a resume section). */
export function resumeCases(matrix: string): ResumeCase[] {
  return Object.hasOwn(resumeSections(), matrix) ? resumeSections()[matrix]! : [];
}

/**
 * The resume section for one subject (`resume --matrix NAME --subject S`, and the main job for an
 * optimizer-owned subject): every correct case's configuration run with S, once each; all must pass.
 * Bitwise equality after a change of layout is asked only of `exact` subjects, so for any other class
 * each configuration resumes in its own layout.
 */
export function resumeCasesFor(matrix: string, subject: string, tolerance: string | undefined): ResumeCase[] {
  const seen = new Set<string>();
  const out: ResumeCase[] = [];
  for (const c of resumeCases(matrix)) {
    if (c.expect !== "pass") continue;
    const { resumeLayout, ...rest } = c;
    const mine: ResumeCase = { ...rest, ...(tolerance === "exact" && resumeLayout ? { resumeLayout } : {}), subject, note: `${c.note} (the configuration of ${c.subject}'s case)` };
    const id = resumeCellId(mine);
    if (!seen.has(id) && seen.add(id)) out.push(mine);
  }
  return out;
}

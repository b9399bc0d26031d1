/**
 * The `train` section of the matrices (SPEC §9, training parity across layouts), run by
 * suites/train.test.ts and `clip-parity train --matrix cpu`. Kept small: deepseek-v3-debug (experts and
 * the MTP replica of tok_embeddings) in the finalize regime, PP2/DP2/EP2 against PP4/EP1, with the
 * known-bad optimizer-owned clippers each on a cell where train.parity must fail.
 */
import { parseLayout } from "../harness/layout/layout.ts";
import { trainId, type TrainCell } from "../harness/training/train-parity.ts";

export interface TrainCase extends TrainCell {
  /** "pass": train.parity must pass; "fail": a known-bad subject it must catch. */
  expect: "pass" | "fail";
  note: string;
}

const DSV3 = "deepseek-v3-debug";
const PP2_DP2_EP2 = "pp2,dp_shard2,ep2";

function tc(subject: string, layouts: string[], steps: number, note: string, extra: Partial<TrainCase> = {}): TrainCase {
  return {
    subject,
    layouts: layouts.map((l) => parseLayout(l)),
    model: DSV3,
    dtype: "f32",
    normType: 2,
    regime: "finalize",
    seed: 0,
    steps,
    init: "per-stage",
    expect: "pass",
    note,
    ...extra,
  };
}

function cpu(): TrainCase[] {
  return [
    tc("titan-mtp", [PP2_DP2_EP2, "pp4", "single"], 3, "optimizer-owned clipper: finalize, sync, bitwise across layouts"),
    tc("exact", [PP2_DP2_EP2, "pp4"], 3, "plain exact clip on harness-finalized gradients", { dtype: "bf16" }),
    tc("bucketed", [PP2_DP2_EP2, "pp4"], 2, "fp32 class: tied copies bitwise, norms within fp32 across layouts", { init: "same" }),
    // known-bad: train.parity must fail
    tc("init-unsynced", [PP2_DP2_EP2, "pp4"], 2, "known-bad: tied copies never synced after per-stage init", { expect: "fail" }),
    tc("replica-own-coef", [PP2_DP2_EP2, "pp4"], 2, "known-bad: the replica clipped by its own stage's coefficient", { expect: "fail" }),
    tc("finalize-forgotten", [PP2_DP2_EP2, "pp4"], 2, "known-bad: tied gradients clipped unfinalized", { expect: "fail" }),
  ];
}

let sections: Record<string, TrainCase[]> | undefined;

export function trainSections(): Record<string, TrainCase[]> {
  return (sections ??= { cpu: cpu() });
}

export function trainCases(matrix: string): TrainCase[] {
  return Object.hasOwn(trainSections(), matrix) ? trainSections()[matrix]! : [];
}

/**
 * The train section for one subject (`train --matrix NAME --subject S`, and the main job for an
 * optimizer-owned subject): every correct case's configuration run with S, once each; all must pass.
 */
export function trainCasesFor(matrix: string, subject: string): TrainCase[] {
  const seen = new Set<string>();
  const out: TrainCase[] = [];
  for (const c of trainCases(matrix)) {
    if (c.expect !== "pass") continue;
    const mine: TrainCase = { ...c, subject, note: `${c.note} (the configuration of ${c.subject}'s case)` };
    const id = trainId(mine);
    if (!seen.has(id) && seen.add(id)) out.push(mine);
  }
  return out;
}

/**
 * The `finalize` section (SPEC §5's finalize regime): clip cells where each physical copy of a tied
 * parameter holds its own partial gradient. Run by suites/finalize.test.ts with the correct clip
 * subjects (which receive harness-finalized gradients), the optimizer-owned clipper `titan-mtp`
 * (which finalizes itself) and, one by one, the optimizer-owned known-bad subjects, each of which
 * its own check must catch on some cell. A separate matrix, so that the `cpu` matrix's cells stay as
 * they are; `clip-parity run --matrix FILE` runs the same cells from a file (finalizeMatrixFile()).
 */
import type { DType } from "../harness/subject/api.ts";
import { CORRECT_SUBJECTS, OPTIMIZER_SUBJECTS } from "../harness/registry/registry.ts";
import { formatLayout, parseLayout } from "../harness/layout/layout.ts";
import type { Case, Matrix } from "../harness/cell/cell.ts";

/** Tie groups split over 2 or 4 stages, with FSDP/EP/TP beside PP, and pp = 1 (one tensor holds both copies). */
export const FINALIZE_LAYOUTS = ["pp2,dp_shard2,ep2", "pp4", "single", "pp2,tp2", "pp3", "pp2,dp_replicate2", "dp_shard2,ep2"];

export function finalizeMatrix(): Matrix {
  const cases: Case[] = [];
  FINALIZE_LAYOUTS.forEach((spec, k) => {
    const layout = parseLayout(spec);
    const dtype: DType = k % 2 ? "bf16" : "f32";
    for (const normType of [2, Infinity, 1]) cases.push({ layout, model: "deepseek-v3-debug", dtype: normType === 2 ? "f32" : dtype, normType, regime: "finalize", seed: 0 });
  });
  // an untied model: finalize is `active` there
  cases.push({ layout: parseLayout("pp2,tp2"), model: "llama3-debug", dtype: "f32", normType: 2, regime: "finalize", seed: 0 });
  return {
    name: "finalize",
    description: "the finalize regime: tied copies hold their own partial gradients (deepseek-v3-debug's MTP replica)",
    backend: "cpu",
    cases,
    subjects: [...CORRECT_SUBJECTS, ...OPTIMIZER_SUBJECTS],
  };
}

/** The same matrix as a matrix file's JSON (for `clip-parity run --matrix FILE`). */
export function finalizeMatrixFile(): object {
  const m = finalizeMatrix();
  return {
    name: m.name,
    description: m.description,
    subjects: m.subjects,
    cases: m.cases.map((c) => ({ layout: formatLayout(c.layout), model: c.model, dtype: c.dtype, norm: c.normType === Infinity ? "inf" : c.normType, regime: c.regime, seed: c.seed })),
  };
}

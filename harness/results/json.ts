/**
 * The `--json` shape, which other tools and CI scripts rely on:
 * { cells: [{ id, subject, layout, model, dtype, normType, regime, seed, maxNorm, totalNorm,
 *   referenceNorm, clipCoef, checks: [{ id, status, message }] }], summary: { cells, passed, failed, skipped } }
 * normType is a number or "inf"; non-finite norms are written as the strings "inf", "-inf" and "nan".
 * Each cell also carries ranks, memory (per rank: gradBytes, scratchPeakBytes, budgetBytes, leakedBytes),
 * comm (per rank: collectives, bytes, byKind), repro, durationMs and, when measured, timings (ms per phase)
 * and tensorHash. Beside cells and summary, `catchBy` names the run's known-bad subjects and the checks that
 * must catch each, and `sections` holds the regression, train and resume sections of a whole run (each
 * { kind, matrix, subject?, cases: [{ id, expect, check, status, message, met, durationMs }], summary, verdict }).
 * schema.ts validates it.
 */
import type { CellResult, RunSummary } from "./types.ts";
import { sectionsField, type SectionResult } from "./sections.ts";

export function jsonNumber(x: number | null): number | string | null {
  if (x === null) return null;
  if (Number.isNaN(x)) return "nan";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  return x;
}

export function cellJson(r: CellResult) {
  return {
    id: r.id,
    subject: r.cell.subject,
    layout: { ...r.cell.layout },
    model: r.cell.model,
    dtype: r.cell.dtype,
    normType: r.cell.normType === Infinity ? "inf" : r.cell.normType,
    regime: r.cell.regime,
    seed: r.cell.seed,
    maxNorm: jsonNumber(r.maxNorm),
    errorIfNonfinite: r.errorIfNonfinite,
    backend: r.backend,
    totalNorm: jsonNumber(r.totalNorm),
    referenceNorm: jsonNumber(r.referenceNorm),
    clipCoef: jsonNumber(r.clipCoef),
    checks: r.checks.map((c) => ({ id: c.id, status: c.status, message: c.message })),
    ranks: r.ranks.map((x) => ({ rank: x.rank, norm: jsonNumber(x.norm ?? null), ...(x.error ? { error: x.error } : {}) })),
    memory: r.memory.map((m) => ({
      rank: m.rank,
      gradBytes: m.gradBytes,
      scratchPeakBytes: m.scratchPeakBytes,
      budgetBytes: m.budgetBytes,
      leakedBytes: m.leakedBytes,
      // cuda: the ledger's stages with the device's own free/total readings beside them
      ...(m.stages.some((s) => s.device !== undefined) ? { device: m.stages.find((s) => s.device)!.device, stages: m.stages } : {}),
    })),
    comm: r.comm.map((c, rank) => ({
      rank,
      collectives: c.calls,
      bytes: c.bytes,
      byKind: Object.fromEntries(Object.entries(c.byKind ?? {}).map(([k, v]) => [k, v.calls])),
    })),
    repro: r.repro,
    durationMs: Math.round(r.durationMs),
    ...(r.timings ? { timings: Object.fromEntries(Object.entries(r.timings).map(([k, v]) => [k, Math.round(v * 100) / 100])) } : {}),
    ...(r.tensorHash !== undefined ? { tensorHash: r.tensorHash } : {}),
  };
}

/**
 * `catchBy`: the run's known-bad subjects and the checks that must catch each, so that reports of this file
 * show their failures as expected. `sections`: the regression, train and resume sections the run judged
 * after its cells (sections.ts), each with its cases, counts and verdict.
 */
export function jsonReport(
  results: readonly CellResult[],
  summary: RunSummary,
  catchBy?: Readonly<Record<string, readonly string[]>>,
  sections?: readonly SectionResult[],
) {
  return { cells: results.map(cellJson), summary, ...catchByField(catchBy), ...sectionsField(sections) };
}

/** A result file's `catchBy` field: written only when the run had a known-bad subject, so older readers and diffs are unchanged otherwise. */
export function catchByField<T extends Readonly<Record<string, readonly string[]>>>(catchBy: T | undefined): { catchBy?: T } {
  return catchBy && Object.keys(catchBy).length ? { catchBy } : {};
}

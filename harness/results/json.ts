/**
 * The `--json` shape, which other tools and CI scripts rely on:
 * { cells: [{ id, subject, layout, model, dtype, normType, regime, seed, maxNorm, totalNorm,
 *   referenceNorm, clipCoef, checks: [{ id, status, message }] }], summary: { cells, passed, failed, skipped } }
 * normType is a number or "inf"; non-finite norms are written as the strings "inf", "-inf" and "nan".
 * A user's subject module is named by its defineSubject `name` in `id` and `subject`, its path in `subjectPath`.
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

/** Whether a subject spec names a module file (harness/registry/registry.ts's rule; restated here, results sit below the registry). */
const MODULE_PATH = (spec: string) => /^(\.{1,2}[\\/]|\/)/.test(spec) || /\.(ts|js|mjs)$/.test(spec);

/**
 * How a cell's subject is shown: a user's module by the `name` its defineSubject gives (in the id, the
 * grid and JUnit classnames: a path is no name), the path kept as subjectPath (and in the reproduce line).
 */
function shownSubject(r: Pick<CellResult, "id" | "cell" | "subjectName">): { id: string; subject: string; subjectPath?: string } {
  const spec = r.cell.subject;
  if (!MODULE_PATH(spec) || !r.subjectName || !r.id.startsWith(`${spec}/`)) return { id: r.id, subject: spec };
  return { id: `${r.subjectName}/${r.id.slice(spec.length + 1)}`, subject: r.subjectName, subjectPath: spec };
}

export function cellJson(r: CellResult) {
  const shown = shownSubject(r);
  return {
    id: shown.id,
    subject: shown.subject,
    ...(shown.subjectPath !== undefined ? { subjectPath: shown.subjectPath } : {}),
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
    ...(r.verdict ? { verdict: r.verdict } : {}),
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
  return { cells: results.map(cellJson), summary, ...catchByField(catchBy && shownCatchBy(results, catchBy)), ...sectionsField(sections) };
}

/** A run's catchBy (keyed by subject spec) keyed as cellJson shows the subjects: a user module by its name. */
export function shownCatchBy(results: readonly CellResult[], catchBy: Readonly<Record<string, readonly string[]>>): Record<string, readonly string[]> {
  const names = new Map(results.map((r) => [r.cell.subject, shownSubject(r).subject]));
  return Object.fromEntries(Object.entries(catchBy).map(([spec, checks]) => [names.get(spec) ?? spec, checks]));
}

/** A result file's `catchBy` field: written only when the run had a known-bad subject, so older readers and diffs are unchanged otherwise. */
export function catchByField<T extends Readonly<Record<string, readonly string[]>>>(catchBy: T | undefined): { catchBy?: T } {
  return catchBy && Object.keys(catchBy).length ? { catchBy } : {};
}

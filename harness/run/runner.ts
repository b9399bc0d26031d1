/**
 * Runs cells one after another (each cell is already SPMD inside), loading each subject once,
 * and reports progress through optional hooks.
 */
import type { Subject } from "../clip/api.ts";
import { loadSubject } from "../clip/registry.ts";
import type { BackendKind } from "../backend/backend.ts";
import { cellId, runCell, type Budgets, type Cell, type CellResult, type RunCellOptions } from "./cell.ts";

export interface RunnerHooks {
  onCellStart?(cell: Cell, index: number, total: number): void;
  onCellEnd?(result: CellResult, index: number, total: number): void;
}

export interface RunSummary {
  cells: number;
  passed: number;
  failed: number;
  skipped: number;
}

export function cellFailed(r: CellResult): boolean {
  return r.checks.some((c) => c.status === "fail");
}

export function summarize(results: readonly CellResult[]): RunSummary {
  let failed = 0;
  let skipped = 0;
  for (const r of results) {
    if (cellFailed(r)) failed++;
    else if (r.checks.every((c) => c.status === "skip")) skipped++;
  }
  return { cells: results.length, passed: results.length - failed - skipped, failed, skipped };
}

export class SubjectCache {
  private readonly loaded = new Map<string, Promise<Subject>>();
  get(spec: string): Promise<Subject> {
    let s = this.loaded.get(spec);
    if (!s) this.loaded.set(spec, (s = loadSubject(spec)));
    return s;
  }
}

export interface RunOptions {
  backend?: BackendKind;
  filter?: string;
  hooks?: RunnerHooks;
  subjects?: SubjectCache;
  timeoutMs?: number;
  /** Passed to every runCell: sees each cell's tensors before they are freed (e.g. --golden hashes). */
  inspect?: RunCellOptions["inspect"];
  budgets?: Budgets;
}

export function filterCells(cells: readonly Cell[], filter?: string): Cell[] {
  if (!filter) return [...cells];
  return cells.filter((c) => cellId(c).includes(filter));
}

export async function runCells(cells: readonly Cell[], options: RunOptions = {}): Promise<{ results: CellResult[]; summary: RunSummary }> {
  const subjects = options.subjects ?? new SubjectCache();
  const selected = filterCells(cells, options.filter);
  const results: CellResult[] = [];
  for (const [i, cell] of selected.entries()) {
    options.hooks?.onCellStart?.(cell, i, selected.length);
    const subject = await subjects.get(cell.subject);
    const result = await runCell(cell, {
      backend: options.backend,
      subject,
      timeoutMs: options.timeoutMs,
      inspect: options.inspect,
      budgets: options.budgets,
    });
    results.push(result);
    options.hooks?.onCellEnd?.(result, i, selected.length);
  }
  return { results, summary: summarize(results) };
}

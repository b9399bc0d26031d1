/**
 * A cell as a job of the sandbox's pool: its input, what it may hold, which cells share a reference,
 * and the result a cell gets when its worker handed none back (the isolation fault, every other check
 * skipped).
 */
import { CHECK_IDS } from "../checks/index.ts";
import { isolationCheck } from "../checks/isolation.ts";
import { DTYPE_BYTES, type BackendKind } from "../backend/backend.ts";
import { getModel } from "../model/models.ts";
import { cellId, reproCommand, type Budgets, type Cell } from "../cell/cell.ts";
import type { CellResult } from "../results/types.ts";
import { runCell } from "./cell.ts";
import { jobKind, type JobHandlers, type JobTools } from "./job.ts";

/** A cell's job input: the cell and how to run it. */
export interface CellJobInput {
  cell: Cell;
  options: {
    backend: BackendKind;
    timeoutMs?: number;
    budgets?: Budgets;
    hashTensors?: boolean;
    dumpDir?: string;
    maxLiveBytes?: number;
  };
}

export const jobs = {
  cell: async ({ cell, options }: CellJobInput, tools: JobTools) => runCell(cell, { ...options, subject: await tools.subjectFor(cell.subject) }),
} satisfies JobHandlers;

export const CELL_JOB = jobKind("cell", import.meta.url);

/** What a cell may hold at its peak: every rank's gradients (replicated over dp_replicate), with slack. */
export function estimateCellBytes(cell: Cell): number {
  let params = 0;
  try {
    params = getModel(cell.model).totalParams;
  } catch {
    return 64 * 1024 * 1024; // a model the worker will refuse: it holds nothing
  }
  const copies = cell.layout.dp_replicate * Math.max(1, Math.min(cell.layout.tp, 2));
  return params * DTYPE_BYTES[cell.dtype] * copies * 1.25 + 32 * 1024 * 1024;
}

/** The key of a cell's reference: cells with the same key share one computation. */
export function referenceKey(c: Cell): string {
  return [c.model, c.dtype, c.normType, c.regime, c.seed, c.step ?? 0].join("|");
}

/** A failing result for a cell whose worker did not hand one back. */
export function isolationFailure(input: CellJobInput, what: string, ms: number): CellResult {
  const c = input.cell;
  const repro = reproCommand(c, input.options.backend);
  return {
    id: cellId(c),
    cell: c,
    backend: input.options.backend,
    subjectName: c.subject,
    maxNorm: c.maxNorm ?? NaN,
    errorIfNonfinite: c.errorIfNonfinite ?? false,
    totalNorm: null,
    referenceNorm: NaN,
    clipCoef: NaN,
    checks: [...CHECK_IDS.map((id) => ({ id, status: "skip" as const, message: "the cell did not finish: see isolation" })), isolationCheck(what, repro)],
    ranks: [],
    memory: [],
    comm: [],
    liveness: null,
    repro,
    durationMs: ms,
  };
}

/** A cell job's outcome as a result: the isolation check added to what the worker judged. */
export function cellOutcome(input: CellJobInput, o: { result?: unknown; fault: string | null; ms: number }): CellResult {
  if (o.result === undefined) return isolationFailure(input, o.fault ?? "the cell's worker handed back no result", o.ms);
  const r = o.result as CellResult;
  r.checks.push(isolationCheck(o.fault, o.fault ? r.repro : undefined));
  return r;
}

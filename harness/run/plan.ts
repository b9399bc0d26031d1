/**
 * `clip-parity plan`: how much scratch memory and how many collectives each subject needs, per
 * rank, for a real model at a real scale, without a GPU: every subject runs unchanged on the meta
 * backend, whose tensors have shapes and bytes but no storage.
 */
import { getModel } from "../model/models.ts";
import { formatLayout, worldSize, type ValidLayout } from "../layout/layout.ts";
import type { Cell } from "../cell/cell.ts";
import type { CellResult } from "../results/types.ts";
import { runCell } from "../execute/cell.ts";
import type { Subject } from "../subject/api.ts";
import { isSubjectPath } from "../registry/registry.ts";
import { ClipParityError } from "../errors.ts";
import { JOB_DEADLINE_PHASES, DEFAULT_TIMEOUT_MS, probeSubjects, WorkerPool } from "../sandbox/pool.ts";
import { jobKind, type JobHandlers, type JobTools } from "../execute/job.ts";

export interface PlanRank {
  rank: number;
  gradBytes: number;
  scratchPeakBytes: number;
  collectives: number;
  commBytes: number;
}

export interface PlanResult {
  model: string;
  layout: string;
  dtype: string;
  subjects: { subject: string; ranks: PlanRank[]; stages: { rank: number; stages: { stage: string; liveBytes: number; peakBytes: number }[] } ; liveness: string | null }[];
}

/** Called after each subject's meta run: plan may take long at a scale of thousands of ranks. */
export type PlanProgress = (subject: string, index: number, total: number, world: number) => void;

/** One subject's meta run, as a worker job: plain data in and out. */
export interface PlanJobInput {
  model: string;
  layout: ValidLayout;
  dtype: Cell["dtype"];
  subject: string;
  /** Wall-clock limit of the subject's meta run, ms. */
  timeoutMs: number;
}

export type PlanSubjectResult = PlanResult["subjects"][number];

/** Runs one subject on the meta backend (in a worker: worker.ts) and keeps what plan reports. */
export async function planSubject(input: PlanJobInput, subject: Subject): Promise<PlanSubjectResult> {
  const cell: Cell = { subject: input.subject, layout: input.layout, model: input.model, dtype: input.dtype, normType: 2, regime: "active", seed: 0 };
  const r: CellResult = await runCell(cell, { backend: "meta", subject, timeoutMs: input.timeoutMs });
  const worst = r.memory.reduce((a, b) => (b.scratchPeakBytes > a.scratchPeakBytes ? b : a));
  return {
    subject: input.subject,
    ranks: r.memory.map((m) => ({
      rank: m.rank,
      gradBytes: m.gradBytes,
      scratchPeakBytes: m.scratchPeakBytes,
      collectives: r.comm[m.rank]!.calls,
      commBytes: r.comm[m.rank]!.bytes,
    })),
    stages: { rank: worst.rank, stages: worst.stages },
    liveness: r.liveness,
  };
}

/**
 * The default limit per subject phase, as `run`'s: a meta run of 256 ranks plans in seconds, and a subject that hangs
 * should fail its row within a minute, not an hour (`--timeout-s` raises it for larger worlds).
 */
export const jobs = {
  plan: async (input: PlanJobInput, tools: JobTools) => planSubject(input, await tools.subjectFor(input.subject)),
} satisfies JobHandlers;

const PLAN_JOB = jobKind("plan", import.meta.url);

export const PLAN_TIMEOUT_MS = DEFAULT_TIMEOUT_MS;

/**
 * Runs each subject once on the meta backend (shapes and bytes, no values), each in a worker of the
 * pool like every cell: a subject that exits, hangs or throws outside its clip fails its row, not plan.
 */
export async function planCells(
  model: string,
  layout: ValidLayout,
  dtype: Cell["dtype"],
  subjects: readonly string[],
  progress?: PlanProgress,
  options: { heapMb?: number; timeoutMs?: number } = {},
): Promise<PlanResult> {
  const timeoutMs = options.timeoutMs ?? PLAN_TIMEOUT_MS;
  getModel(model);
  await probeSubjects(subjects.filter(isSubjectPath), Math.min(DEFAULT_TIMEOUT_MS, timeoutMs), options.heapMb);
  const out: PlanResult = { model, layout: formatLayout(layout), dtype, subjects: [] };
  const pool = new WorkerPool({ workers: 1, timeoutMs, heapMb: options.heapMb });
  try {
    for (const [i, name] of subjects.entries()) {
      progress?.(name, i, subjects.length, worldSize(layout));
      const o = await pool.submit({ index: i, kind: PLAN_JOB.name, module: PLAN_JOB.module, input: { model, layout, dtype, subject: name, timeoutMs } satisfies PlanJobInput, deadlineMs: JOB_DEADLINE_PHASES * timeoutMs });
      if (o.fault !== null || o.result === undefined) throw new ClipParityError("E_ISOLATION", `plan: subject ${name}: isolation: ${o.fault ?? "no result"}`, 1);
      out.subjects.push(o.result as PlanSubjectResult);
    }
  } finally {
    await pool.close();
  }
  return out;
}

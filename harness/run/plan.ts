/**
 * `clip-parity plan`: how much scratch memory and how many collectives each subject needs, per
 * rank, for a real model at a real scale, without a GPU: every subject runs unchanged on the meta
 * backend, whose tensors have shapes and bytes but no storage.
 */
import { getModel } from "../model/models.ts";
import { formatLayout, worldSize, type ValidLayout } from "../layout/layout.ts";
import type { Cell } from "../spec/cell.ts";
import type { CellResult } from "../results/types.ts";
import { runCell } from "./cell.ts";
import { SubjectCache } from "./runner.ts";

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

/**
 * Runs each subject once on the meta backend (shapes and bytes, no values). Trusted code only: a
 * plan runs in this process, since it exists to measure the subject's own allocations at scale.
 */
export async function planCells(
  model: string,
  layout: ValidLayout,
  dtype: Cell["dtype"],
  subjects: readonly string[],
  progress?: PlanProgress,
): Promise<PlanResult> {
  getModel(model);
  const cache = new SubjectCache();
  for (const name of subjects) await cache.get(name);
  const out: PlanResult = { model, layout: formatLayout(layout), dtype, subjects: [] };
  for (const [i, name] of subjects.entries()) {
    progress?.(name, i, subjects.length, worldSize(layout));
    const subject = await cache.get(name);
    const cell: Cell = { subject: name, layout, model, dtype, normType: 2, regime: "active", seed: 0 };
    const r: CellResult = await runCell(cell, { backend: "meta", subject, timeoutMs: 3_600_000 });
    const worst = r.memory.reduce((a, b) => (b.scratchPeakBytes > a.scratchPeakBytes ? b : a));
    out.subjects.push({
      subject: name,
      ranks: r.memory.map((m) => ({
        rank: m.rank,
        gradBytes: m.gradBytes,
        scratchPeakBytes: m.scratchPeakBytes,
        collectives: r.comm[m.rank].calls,
        commBytes: r.comm[m.rank].bytes,
      })),
      stages: { rank: worst.rank, stages: worst.stages },
      liveness: r.liveness,
    });
  }
  return out;
}


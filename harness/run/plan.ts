/**
 * `clip-parity plan`: how much scratch memory and how many collectives each subject needs, per
 * rank, for a real model at a real scale, without a GPU: every subject runs unchanged on the meta
 * backend, whose tensors have shapes and bytes but no storage.
 */
import { parseArgs } from "node:util";
import { InputError } from "../errors.ts";
import { CORRECT_SUBJECTS } from "../clip/registry.ts";
import { getModel } from "../model/models.ts";
import { formatLayout, parseLayout } from "../layout/layout.ts";
import { DTYPES, runCell, type Cell, type CellResult } from "./cell.ts";
import { SubjectCache } from "./runner.ts";
import { writeFileAtomic } from "./cli.ts";

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

export async function planCells(model: string, layoutSpec: string, dtype: Cell["dtype"], subjects: readonly string[]): Promise<PlanResult> {
  const layout = parseLayout(layoutSpec);
  getModel(model);
  const cache = new SubjectCache();
  const out: PlanResult = { model, layout: formatLayout(layout), dtype, subjects: [] };
  for (const name of subjects) {
    const subject = await cache.get(name);
    const cell: Cell = { subject: name, layout, model, dtype, normType: 2, regime: "active", seed: 0 };
    const r: CellResult = await runCell(cell, { backend: "meta", subject });
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

const gb = (n: number) => `${(n / 1e9).toFixed(3)} GB`;

export async function planCommand(args: string[]): Promise<number> {
  let v;
  try {
    v = parseArgs({
      args,
      options: { model: { type: "string" }, layout: { type: "string" }, dtype: { type: "string" }, subject: { type: "string", multiple: true }, json: { type: "string" } },
      strict: true,
    }).values;
  } catch (err) {
    throw new InputError((err as Error).message);
  }
  if (!v.model) throw new InputError("--model is required");
  if (!v.layout) throw new InputError("--layout is required");
  const dtype = (v.dtype ?? "bf16") as Cell["dtype"];
  if (!DTYPES.includes(dtype)) throw new InputError(`--dtype: "${v.dtype}" is not one of ${DTYPES.join(", ")}`);
  const started = performance.now();
  const plan = await planCells(v.model, v.layout, dtype, v.subject ?? CORRECT_SUBJECTS);
  const out = process.stdout;
  out.write(`plan: ${plan.model} on ${plan.layout}, ${dtype} gradients (meta backend)\n`);
  out.write(`${"subject".padEnd(20)} ${"grads/rank (max)".padStart(18)} ${"scratch peak (max)".padStart(20)} ${"collectives (max)".padStart(18)} ${"comm bytes (max)".padStart(18)}\n`);
  for (const s of plan.subjects) {
    const max = (f: (r: PlanRank) => number) => Math.max(...s.ranks.map(f));
    out.write(
      `${s.subject.padEnd(20)} ${gb(max((r) => r.gradBytes)).padStart(18)} ${gb(max((r) => r.scratchPeakBytes)).padStart(20)} ` +
        `${String(max((r) => r.collectives)).padStart(18)} ${String(max((r) => r.commBytes)).padStart(18)}` +
        `${s.liveness ? `  liveness: ${s.liveness}` : ""}\n`,
    );
  }
  const first = plan.subjects[0];
  if (first) {
    out.write(`stage profile of rank ${first.stages.rank} (${first.subject}):\n`);
    for (const st of first.stages.stages) out.write(`  ${st.stage.padEnd(14)} live ${gb(st.liveBytes)}  peak ${gb(st.peakBytes)}\n`);
  }
  out.write(`planned in ${((performance.now() - started) / 1000).toFixed(2)} s\n`);
  if (v.json) writeFileAtomic(v.json, JSON.stringify(plan, null, 2) + "\n");
  return 0;
}

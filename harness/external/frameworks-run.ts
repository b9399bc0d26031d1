/**
 * The data of docs/frameworks.md: every declared framework (adapters/torch/frameworks/) over the gpu4
 * matrix and the cpu matrix's distinct shapes, on the cpu backend, from a real run (`npm run frameworks`).
 * The run's per-cell records go to docs/frameworks.json; the page is rendered from them and nothing else
 * (scripts/docs/frameworks-page.ts), and a test checks that a fresh run of a small subset gives the same
 * records.
 *
 * Each failing cell is also given causes: one line each, read from its check messages (no reduction over
 * PP, the MTP replica counted twice, a clip coefficient in bfloat16, ...). They are what the page calls
 * "explained": the classification is in `causesOf`, the evidence in the cell's messages.
 */
import { worldSize } from "../layout/layout.ts";
import titan from "../subject/builtin/titan.ts";
import { runCell } from "../execute/cell.ts";
import { cellId, type Case, type Cell } from "../cell/cell.ts";
import type { CellResult } from "../results/types.ts";
import { cannotRunOn, loadFrameworks, outsideConfigurations, type Framework } from "./torch/frameworks.ts";
import { vacuity } from "./vacuity.ts";
import type { TorchOptions } from "./torch/options.ts";
import { causesOf, messageHead } from "./causes.ts";
import type { NoteCost } from "./note-cost.ts";
import { closeTorchSessions, isTorchSubject, loadTorchSubject, type TorchSubject } from "./torch/subject.ts";
import { ompThreads } from "../util/env.ts";

/**
 * What a fresh run in CI compares with the committed data: seven frameworks (torch, torch-total-norm,
 * torch-fsdp1 and torchtitan share one session, transformers, deepspeed-bf16 and deepspeed-zero have their own)
 * on seven gpu4 cells that show their typical verdicts: no PP reduction, a pass, the MTP replica counted twice with one
 * collective per mesh, a bfloat16 coefficient the bf16 class accepts (a pass since it does), a two-step clip
 * (whose saved norm must not read as a leak), DeepSpeed's mpu over pp x tp with a tied replica, and FSDP1's
 * flat gradient over HYBRID_SHARD built and copied back, its float32 coefficient rounded to bfloat16 (the one
 * cell FSDP1 can be built for; the others are not applicable to it), and a ZeRO engine built per cell over
 * dp_replicate x dp_shard, experts flattened with the rest, and over FSDP2 x TP with the mpu. None hinges on float32 rounding a few ulps
 * either side of a tolerance class, which another CPU's kernels could move.
 */
export const CI_SUBSET = {
  frameworks: ["torch", "torch-total-norm", "torch-fsdp1", "torchtitan", "transformers", "deepspeed-bf16", "deepspeed-zero"],
  cases: [
    "pp4/llama3-debug/bf16/n2/sparse/s0",
    "dp_shard2,tp2/llama3-debug/f32/n2/active/s0",
    "pp2,dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0",
    "dp_shard2,tp2/llama3-debug/bf16/n1/inactive/s0",
    "pp2,tp2/deepseek-v3-debug/f32/n2/active/s0",
    "dp_replicate2,dp_shard2/deepseek-v3-debug/bf16/n1/active/s0",
    "dp_replicate2,dp_shard2/deepseek-v3-debug/f32/n2/active/s0",
  ],
} as const;

/** The built-in subject whose cells the torch cells' times are compared with: torchtitan's clip, in process. */
export const NATIVE_TWIN = titan.name;

/** Milliseconds as seconds, to the millisecond (the page's and the data's precision). */
const ms = (x: number) => Math.round(x) / 1000;

/** The case part of a cell id (without the subject; a whole cell's subject is left out too). */
export const caseKey = (c: Case) => cellId({ ...c, subject: "" }).slice(1);

/** "not run": the framework cannot run here (e.g. it needs CUDA and the cells run on CPU ranks). */
export type CellStatus = "pass" | "fail" | "n/a" | "not run";

export interface FrameworkCellRecord {
  case: string;
  status: CellStatus;
  failed: string[];
  /** First line of each failing check's message (the reproduce line dropped). */
  messages: Record<string, string>;
  /** One-line causes (causesOf), by key. */
  causes: string[];
  /** The convention paths the ranks took, distinct, in rank order. */
  paths: string[];
  notApplicable?: string;
  /** Why the cell is outside the configurations the framework's trainer builds (its file's `configurations`). */
  outside?: string;
  /** Why the cell did not run here (status "not run"). */
  cannotRun?: string;
  /** On a pass: why the pass shows nothing (vacuity.ts: a clip that does not do the work passes it too). */
  vacuous?: string;
  /**
   * A cell that ran: its wall time in runCell (a session start excluded), the target's own call (the slowest
   * rank, under the adapter's collective and memory monitor) and the adapter's share (the cell's time in the
   * adapter and its files, minus the call: TorchCellLog.phases), in seconds; `phases` splits the adapter's share
   * (adapterPhases).
   */
  seconds?: { cell: number; target: number; adapter: number; phases?: Record<string, number> };
  /**
   * A failure in the framework's configurations: its `clip-parity export` script run standalone under torchrun
   * (repro-run.ts): its length in lines, whether it printed REPRODUCED, the checks it saw fail, and whether it was the
   * minimised script (a failure of the layout alone: a few parameters, random gradients) or the whole cell.
   */
  repro?: { lines: number; reproduced: boolean; failed: string[]; minimised?: boolean; cost?: NoteCost; costNotTimed?: string };
}

export interface FrameworkRecord {
  name: string;
  package: string;
  /** null when the framework does not import: then `error` says why and no cell ran. */
  version: string | null;
  description: string;
  trainer: string;
  error?: string;
  cells: FrameworkCellRecord[];
  /** Its file's findings (a cause through the framework's own entry point), each run's rank lines (findings-run.ts). */
  findings?: FindingRecord[];
}

/** One finding's script as `npm run frameworks` ran it: its runs, each rank's one line, in rank order. */
export interface FindingRecord {
  cause: string;
  script: string;
  why: string;
  runs: { label: string; command: string; lines: string[]; exitCode: number; seconds: number }[];
}

export interface FrameworksData {
  /** The same cases run by the built-in subject that mirrors torchtitan's clip, in process: wall seconds by case. */
  native?: { subject: string; seconds: Record<string, number> };
  torch: string;
  backend: string;
  cellTimeoutS: number;
  threads: string;
  cases: { gpu4: number; distinctShapes: number };
  frameworks: FrameworkRecord[];
}

// ---- running -------------------------------------------------------------------------------------------

export function recordOf(r: CellResult, log: TorchSubject["lastRun"], outside: string | null = null): FrameworkCellRecord {
  const failed = r.checks.filter((c) => c.status === "fail");
  const na = log?.notApplicable ?? null;
  return {
    case: cellId(r.cell).slice(r.cell.subject.length + 1),
    status: na ? "n/a" : failed.length ? "fail" : "pass",
    failed: na ? [] : failed.map((c) => c.id),
    messages: na ? {} : Object.fromEntries(failed.map((c) => [c.id, messageHead(c.message).slice(0, 400)])),
    causes: na ? [] : causesOf(r),
    paths: [...new Set((log?.paths ?? []).filter((p): p is string => p !== null))],
    ...(na ? { notApplicable: na } : {}),
    ...(outside && !na ? { outside } : {}),
  };
}

/** The adapter's phases in the order a cell passes them (adapterPhases). */
export const ADAPTER_PHASES = ["inputs", "load", "meshes", "params", "settle", "writeBack", "save", "results"] as const;

/**
 * The adapter's share of a cell split by where it went (seconds, to the ms), in the order a cell passes them:
 * `inputs` the harness writing every rank's shards and job, `load` a rank mapping its shards, `meshes` built
 * for a new layout, `params` the DTensors (and a framework's own objects) built from them, `settle` waiting for
 * freed tensors before the leak count, `writeBack` an argument source's copy back (FSDP1), `save` the clipped
 * shards, `results` the harness reading them back. A rank's phases are the slowest rank's (TorchCellLog.phases),
 * so they overlap and need not add up to the share: the file handshake is what the share has beyond them.
 */
export function adapterPhases(phases: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of ADAPTER_PHASES) if (phases[k] !== undefined) out[k] = ms(phases[k] * 1000);
  return out;
}

/** A cell the framework cannot run here: recorded, not run. */
function notRunRecord(c: Case, why: string): FrameworkCellRecord {
  return { case: caseKey(c), status: "not run", failed: [], messages: {}, causes: [], paths: [], cannotRun: why };
}

export interface RunHooks {
  onCell?(framework: string, record: FrameworkCellRecord, seconds: number, log: TorchSubject["lastRun"]): void;
}

export interface Timing {
  cells: number;
  /** Seconds inside runCell, session starts excluded. */
  cellSeconds: number;
  sessionStarts: number;
  sessionSeconds: number;
}

/**
 * The cases a framework runs. An adapter that builds a framework's inputs in one precision only (an engine
 * built for bf16: its convention's `dtypes`) would leave every float32 case not built and the framework
 * untested, so it runs each case in its first dtype instead, each resulting case once.
 */
export function casesFor(fw: Framework, cases: readonly Case[]): Case[] {
  const dtypes = fw.convention.dtypes;
  if (!dtypes) return [...cases];
  const out = new Map<string, Case>();
  for (const c of cases) {
    const as = dtypes.includes(c.dtype) ? c : { ...c, dtype: dtypes[0]! };
    if (!out.has(caseKey(as))) out.set(caseKey(as), as);
  }
  return [...out.values()];
}

/**
 * Runs every (framework, case). Each framework runs in a torchrun session of its own (one per world size, cells
 * going world size by world size); a framework that does not import is recorded with its error and runs nothing.
 */
export async function runFrameworks(
  names: readonly string[],
  cases: readonly Case[],
  options: Partial<TorchOptions>,
  hooks: RunHooks = {},
): Promise<{ data: Omit<FrameworksData, "cases">; timing: Timing }> {
  const all = loadFrameworks();
  const records = new Map<string, FrameworkRecord>();
  const subjects = new Map<string, TorchSubject>();
  let torch = "";
  for (const name of names) {
    const fw = all.get(name);
    if (!fw) throw new Error(`no framework "${name}" (known: ${[...all.keys()].join(", ")})`);
    const rec: FrameworkRecord = { name, package: fw.package, version: null, description: fw.description, trainer: fw.trainer, cells: [] };
    try {
      const s = loadTorchSubject(`torch:${name}`, options);
      if (!isTorchSubject(s)) throw new Error("internal: not a torch subject");
      subjects.set(name, s);
      rec.version = s.info.packageVersion ?? null;
      torch = s.info.torch;
    } catch (err) {
      rec.error = (err as Error).message.replace(/^subject "[^"]+": /, "");
    }
    records.set(name, rec);
  }
  const timing: Timing = { cells: 0, cellSeconds: 0, sessionStarts: 0, sessionSeconds: 0 };
  const native = { subject: NATIVE_TWIN, seconds: {} as Record<string, number> };
  const twin = titan;
  for (const c of cases) {
    const t0 = performance.now();
    await runCell({ subject: NATIVE_TWIN, ...c }, { subject: twin });
    native.seconds[caseKey(c)] = ms(performance.now() - t0);
  }
  const byWorld = [...new Set(cases.map((c) => worldSize(c.layout)))].sort((a, b) => a - b);
  const order = [...subjects.values()];
  const casesOf = new Map([...records.keys()].map((name) => [name, casesFor(all.get(name)!, cases)]));
  const results = new Map<string, Map<string, FrameworkCellRecord>>();
  // whether a clip that does not do the work passes the case too: judged once per case, on its first pass
  const vacuousCases = new Map<string, string | null>();
  const vacuousWhy = async (c: Case) => {
    const key = caseKey(c);
    if (!vacuousCases.has(key)) vacuousCases.set(key, await vacuity(c));
    return vacuousCases.get(key) ?? null;
  };
  try {
    for (const world of byWorld) {
      for (const s of order) {
        const fw = s.framework!;
        const cannot = cannotRunOn(fw, "cpu");
        for (const c of casesOf.get(fw.name)!.filter((x) => worldSize(x.layout) === world)) {
          if (cannot) {
            const rec = notRunRecord(c, cannot);
            const per = results.get(fw.name) ?? new Map();
            per.set(rec.case, rec);
            results.set(fw.name, per);
            hooks.onCell?.(fw.name, rec, 0, null);
            continue;
          }
          const cell: Cell = { subject: s.name, ...c };
          const t0 = performance.now();
          const r = await runCell(cell, { subject: s });
          const seconds = (performance.now() - t0) / 1000;
          const log = s.lastRun;
          // the cell as it ran: r.errorIfNonfinite is the regime default resolved by runCell
          const outside = outsideConfigurations(fw, { ...c, errorIfNonfinite: r.errorIfNonfinite });
          const rec = recordOf(r, log, outside);
          if (rec.status === "pass") {
            const why = await vacuousWhy(c);
            if (why) rec.vacuous = why;
          }
          if (log && !log.notApplicable) {
            const call = log.phases.call ?? 0;
            const adapter = (log.phases.total ?? call) - call;
            rec.seconds = { cell: ms((seconds - log.sessionStartSeconds) * 1000), target: ms(call * 1000), adapter: ms(adapter * 1000), phases: adapterPhases(log.phases) };
            timing.cells++;
            timing.cellSeconds += seconds - log.sessionStartSeconds;
            if (log.sessionStartSeconds > 0) {
              timing.sessionStarts++;
              timing.sessionSeconds += log.sessionStartSeconds;
            }
          }
          const per = results.get(s.framework!.name) ?? new Map();
          per.set(rec.case, rec);
          results.set(s.framework!.name, per);
          hooks.onCell?.(s.framework!.name, rec, seconds, log);
        }
      }
    }
  } finally {
    await closeTorchSessions();
  }
  for (const [name, rec] of records) {
    const per = results.get(name);
    if (per) rec.cells = casesOf.get(name)!.map((c) => per.get(caseKey(c))!).filter(Boolean);
  }
  return {
    data: { native, torch, backend: "cpu (gloo)", cellTimeoutS: options.cellTimeoutS ?? 180, threads: ompThreads("1"), frameworks: [...records.values()] },
    timing,
  };
}

// ---- rendering ------------------------------------------------------------------------------------------

/** docs/frameworks.json as committed: one cell per line, so that a regenerated page diffs cell by cell. */
export function formatFrameworksData(d: FrameworksData): string {
  const { frameworks, ...rest } = d;
  const fw = frameworks.map((f) => {
    const { cells, ...meta } = f;
    const head = JSON.stringify(meta, null, 2).replace(/\n}$/, "").replace(/\n/g, "\n    ");
    return `    ${head},\n      "cells": [\n${cells.map((c) => `        ${JSON.stringify(c)}`).join(",\n")}\n      ]\n    }`;
  });
  const top = JSON.stringify(rest, null, 2).replace(/\n}$/, "");
  return `${top},\n  "frameworks": [\n${fw.join(",\n")}\n  ]\n}\n`;
}

export type { Framework };

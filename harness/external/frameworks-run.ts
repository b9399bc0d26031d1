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
import { BUILTIN_SUBJECTS } from "../subject/registry.ts";
import { runCell } from "../run/cell.ts";
import { cellId, type Case, type Cell } from "../spec/cell.ts";
import type { CellResult } from "../results/types.ts";
import { cannotRunOn, loadFrameworks, outsideConfigurations, type Framework } from "./torch/frameworks.ts";
import { vacuity } from "./vacuity.ts";
import type { TorchOptions } from "./torch/options.ts";
import { closeTorchSessions, isCollectiveTimeout, isTorchSubject, loadTorchSubject, type TorchSubject } from "./torch/subject.ts";
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
export const NATIVE_TWIN = "titan";

/** Milliseconds as seconds, to the millisecond (the page's and the data's precision). */
const ms = (x: number) => Math.round(x) / 1000;

/** The case part of a cell id (without the subject). */
export const caseKey = (c: Case) => cellId({ subject: "", ...c }).slice(1);

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
  repro?: { lines: number; reproduced: boolean; failed: string[]; minimised?: boolean };
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

// ---- causes ----------------------------------------------------------------------------------------------

/** Cause key -> its one line. Keys ending in ":" take a detail. */
export const CAUSES: Record<string, string> = {
  "two-meshes": "raises when a rank's gradients live on two meshes (dense and expert): one stack/foreach spans both (`All operands in aten.stack.default must have the same mesh`)",
  "cuda-only": "its clip hard-codes CUDA (`device='cuda'`, `torch.cuda.FloatTensor`): it cannot run on CPU ranks",
  "dtensor-collective": "hands a DTensor to a c10d collective (`c10d.allreduce_` has no sharding strategy): it does not take DTensor gradients",
  "no-pp-reduction": "no reduction over the pipeline: each PP stage returns (and clips by) the norm of its own parameters",
  "ranks-differ": "ranks of one stage return different norms",
  "mtp-twice": "the MTP replica of tok_embeddings is counted twice: the norm is too large on every rank",
  "replicated-counted": "replicated shards counted once per replica: the norm is too large",
  "norm-too-small": "the norm is too small on every rank: some gradients are not counted",
  "low-precision-rounding": "norm reduced in the gradients' low-precision dtype, beyond the bf16 class",
  unscaled: "a gradient keeps its unclipped values while clip_coef < 1",
  "replicas-differ": "tied copies are not scaled alike",
  "hang-nonfinite": "a stage raises on its non-finite norm before the PP all_reduce; the other stages wait in it (hang)",
  hang: "hang: some ranks never return",
  "dtype-mismatch-crash": "a stage without expert gradients reduces a float32 zero while the others reduce bfloat16: gloo aborts (`Received data size doesn't match`)",
  crash: "the ranks crash",
  "nonfinite-one-stage": "a non-finite norm is seen on one stage only: the other stages return a finite norm instead of raising",
  "nonfinite-silent": "error_if_nonfinite is set and the norm is non-finite, but ranks return instead of raising",
  "nonfinite-other-error": "raises on a non-finite norm, but another error than the non-finite one",
  "comm-budget": "more collectives across ranks than the fused optimum (one per distinct reduction group, + 1 for the PP reduction when there is PP): one per mesh, or per parameter group",
  "memory-peak": "scratch memory over budget",
  "memory-leak": "leaves tensors allocated after the clip",
  "raises:": "raises",
  "hang-raise:": "some ranks raise, the others wait in a collective (hang)",
  "other:": "",
};

/** A check message's first line, its reproduce command dropped: what the page and an exported script quote. */
export const messageHead = (m: string) => m.split("\n")[0]!.replace(/\s+reproduce:.*$/, "").trim();

function errorType(e: string): string {
  return /^(\w+):/.exec(e)?.[1] ?? "an error";
}

/** A rank's error that only says a peer's connection went away: a consequence of another rank's failure, never its cause. */
const PEER_GONE = /Connection closed by peer|Connection reset by peer/;

/** The causes of one failing cell, read from its checks and ranks. */
export function causesOf(r: CellResult): string[] {
  const fails = new Set(r.checks.filter((c) => c.status === "fail").map((c) => c.id));
  if (!fails.size) return [];
  const msg = (id: string) => r.checks.find((c) => c.id === id)?.message ?? "";
  const out: string[] = [];
  const add = (k: string) => {
    if (!out.includes(k)) out.push(k);
  };
  const errors = r.ranks.map((x) => x.error).filter((e): e is string => Boolean(e));
  const live = r.liveness ?? "";
  if (fails.has("liveness")) {
    // What the ranks that did return said: a rank that raised where the others went on into a collective.
    // (not c10d's timeout of a rank left waiting: that is the hang itself, seen by the rank)
    const raised = r.ranks.map((x) => x.error).filter((e): e is string => Boolean(e) && !/^the PyTorch adapter /.test(e!) && !isCollectiveTimeout(e!));
    if (/did not finish|timed out|never returned/.test(live)) {
      if (fails.has("errors.nonfinite")) add("hang-nonfinite");
      // the error a rank raised itself before one that only saw a peer's socket go (which rank sees which first is a race)
      else if (raised.length) add(`hang-raise:${(raised.find((e) => !PEER_GONE.test(e)) ?? raised[0]!).slice(0, 160)}`);
      else add("hang");
    }
    else if (/Received data size doesn't match|size mismatch/i.test(live)) add("dtype-mismatch-crash");
    else add("crash");
  }
  if (errors.length && !fails.has("liveness")) {
    const e = errors[0]!;
    if (/same mesh|different meshes/.test(e)) add("two-meshes");
    else if (/NVIDIA driver|cuda\.FloatTensor|CUDA|cuda/.test(e)) add("cuda-only");
    else if (/does not have a sharding strategy registered/.test(e) && /c10d/.test(e)) add("dtensor-collective");
    // errors.raised: a raise nothing asked for (a record made before that check existed shows it as parity.norm)
    else if (!/non-?finite/i.test(e) || fails.has("errors.raised") || fails.has("parity.norm")) add(`raises:${errorType(e)}: ${e.replace(/^\w+: /, "").slice(0, 140)}`);
  }
  const norms = r.ranks.filter((x) => typeof x.norm === "number").map((x) => x.norm!);
  const distinct = new Set(norms.map((n) => (Number.isNaN(n) ? "nan" : String(n))));
  if (fails.has("parity.ranks") || (r.cell.layout.pp > 1 && distinct.size > 1 && !errors.length)) add(r.cell.layout.pp > 1 ? "no-pp-reduction" : "ranks-differ");
  else if (fails.has("parity.norm") && !errors.length && !fails.has("liveness")) {
    const rel = Number(/relative error ([\d.e+-]+)/.exec(msg("parity.norm"))?.[1]);
    const norm = norms[0] ?? NaN;
    // float32 accumulation is within fp32-accum's bound: a float32 norm beyond it is a wrong quantity, judged by its sign below
    if (rel < 1e-3 && r.cell.dtype !== "f32") add("low-precision-rounding");
    else if (norm > r.referenceNorm && r.cell.model.startsWith("deepseek") && r.cell.layout.pp > 1) add("mtp-twice");
    else if (norm > r.referenceNorm) add("replicated-counted");
    else if (norm < r.referenceNorm) add("norm-too-small");
    else add(`other:${messageHead(msg("parity.norm"))}`);
  }
  if (fails.has("errors.nonfinite") && !fails.has("liveness")) {
    const m = msg("errors.nonfinite");
    if (/not for the non-finite norm/.test(m)) add("nonfinite-other-error");
    else if (r.cell.layout.pp > 1 && errors.length) add("nonfinite-one-stage");
    else add("nonfinite-silent");
  }
  if (fails.has("parity.tensors") && !errors.length) add(`other:${messageHead(msg("parity.tensors"))}`);
  if (fails.has("scaling.nonempty")) add("unscaled");
  if (fails.has("scaling.replicas")) add("replicas-differ");
  if (fails.has("comm.budget")) add("comm-budget");
  if (fails.has("memory.peak")) add("memory-peak");
  if (fails.has("memory.leak")) add("memory-leak");
  return out;
}

/**
 * What a root cause means for the framework's maintainers: "correctness" a wrong result (a listed failure);
 * "performance" a right result at a cost beyond the fused optimum (a note); "unsupported input" a raise that
 * refuses an input the framework does not support by design (DTensor refuses ops across meshes), not a wrong result.
 */
export type CauseClass = "correctness" | "performance" | "unsupported input";

/** The class of a cause without a `<key>#class` in its framework's explain. */
const CAUSE_CLASS: Record<string, CauseClass> = { "comm-budget": "performance", "two-meshes": "unsupported input" };

/** The upstream status of a cause without a `<key>#upstream` in its framework's explain (the same for every framework). */
const CAUSE_UPSTREAM: Record<string, string> = {
  "two-meshes": "known: https://github.com/pytorch/pytorch/issues/180346 (DTensor refuses ops across meshes by design)",
};

/**
 * An explain entry's attributes, beside its text under the cause key: `<key>#source` the framework's file:function
 * where the cause lies, `<key>#upstream` "known: <link> ..." or "not known upstream", `<key>#class` a CauseClass.
 */
const ATTRIBUTE = /#(source|upstream|class)$/;

/** One root cause as the page lists it: its line, where it lies in the framework's source, its upstream status and class. */
export interface RootCause {
  key: string;
  text: string;
  source: string | null;
  upstream: string;
  cls: CauseClass;
}

/** The explain key that covers a cause key: itself, or a prefix that holds the colon ("raises:IndexError" for "raises:IndexError: ..."). */
function explainKey(key: string, explain: Record<string, string>): string | null {
  if (explain[key] !== undefined) return key;
  return Object.keys(explain).find((k) => !ATTRIBUTE.test(k) && k.includes(":") && key.startsWith(k)) ?? null;
}

/** A cause key as its root cause: the framework's explain entry and its attributes, else the generic line. */
export function rootCause(key: string, explain: Record<string, string> = {}): RootCause {
  const at = explainKey(key, explain);
  const attr = (a: string) => (at !== null ? explain[`${at}#${a}`] : undefined) ?? explain[`${key}#${a}`];
  const base = key.includes(":") ? key.slice(0, key.indexOf(":") + 1) : key;
  const cls = attr("class") ?? CAUSE_CLASS[key] ?? CAUSE_CLASS[base] ?? "correctness";
  if (cls !== "correctness" && cls !== "performance" && cls !== "unsupported input") {
    throw new Error(`explain "${at ?? key}#class": "${cls}" is not a cause class (correctness, performance, unsupported input)`);
  }
  return { key, text: causeText(key, explain), source: attr("source") ?? null, upstream: attr("upstream") ?? CAUSE_UPSTREAM[key] ?? "not known upstream", cls };
}

/** A cause key as its line: the framework's own explanation when its file has one, else the generic line. */
export function causeText(key: string, explain: Record<string, string> = {}): string {
  // A key with a detail ("raises:IndexError: ...") is matched by any prefix that holds the colon.
  const at = explainKey(key, explain);
  const own = at !== null ? explain[at] : undefined;
  if (own) return own;
  const i = key.indexOf(":");
  if (i < 0) return CAUSES[key] ?? key;
  const kind = key.slice(0, i + 1);
  const detail = key.slice(i + 1);
  return kind === "raises:" ? `raises ${detail}` : kind === "hang-raise:" ? `some ranks raise ${detail}; the others wait in a collective (hang)` : detail;
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
  const twin = BUILTIN_SUBJECTS[NATIVE_TWIN]!;
  for (const c of cases) {
    const t0 = performance.now();
    await runCell({ subject: NATIVE_TWIN, ...c }, { subject: twin });
    native.seconds[caseKey(c)] = ms(performance.now() - t0);
  }
  const byWorld = [...new Set(cases.map((c) => worldSize(c.layout)))].sort((a, b) => a - b);
  const order = [...subjects.values()];
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
        for (const c of cases.filter((x) => worldSize(x.layout) === world)) {
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
    if (per) rec.cells = cases.map((c) => per.get(caseKey(c))!).filter(Boolean);
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

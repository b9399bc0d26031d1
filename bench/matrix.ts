/**
 * Cells at memory speed (issue 13): how far a cell's phases are from the memory-touch lower bound.
 *
 * Read bandwidth BW is measured in the same run: the native `readPass` kernel (a plain read of every
 * word) over a buffer of --mib MiB, at least 4x the last-level cache, written first so that its pages
 * are real. Every figure below is a ratio time / (bytes touched / BW): 1.0 would be a cell that only
 * streams its bytes through the cores once at read speed.
 *
 * Bytes touched by one cell, with G = the gradient bytes of the cell (sum over ranks of the local
 * gradient bytes, CellResult.memory[].gradBytes: replicas count once per rank that holds them):
 *   generate   G   the gradients are written once
 *   subject    3G  read once for the norm, read and written once by the scale
 *   checks     G   read once by verifyScaled (parity.tensors), which regenerates g instead of reading it
 *   reference  R   one pass of the full logical gradients (model elements with a gradient x dtype size),
 *                  only when the reference is not cached (once per model, dtype, norm, regime, seed, step)
 *   other phases (plan, allocate, collectives, free): no bytes; their time counts against the total.
 * Total bound: 5G (+ R). Per phase the table shows its own ratio (time / its bytes' bound) and its share of
 * the total ratio (time / the cell's whole bound); the shares add up to the total.
 *
 * Part 1: a fixed set of 12 cells of the `cpu` matrix (both debug models, f32 and bf16, six layouts from
 * one rank to eight, subject `bucketed`), run in this thread through runCell, the reference cached (it
 * is measured once, cold, beside them), tinybench over interleaved rounds with the read pass in each
 * round. Part 2 (skip with --no-matrix): the whole `cpu` matrix with one subject through the library
 * runner (runMatrix, workers: 1), every reference computed once; then the same table over its general-p
 * cells alone (p other than 1, 2, inf: the cells that compute |x|^p per element, issue 44), whose figures
 * close the output beside the two lines above them.
 *
 * Part 3 (--scale, opt-in: 3 GB and about a minute): the cost growth with model size, one cell per model
 * from llama3-debug to qwen3-0.6b (f32, tp8, 2-norm, active, subject bucketed) as cells/s against the
 * cell's gradient bytes; --write-doc writes that table to docs/scale.md (generated, never hand-edited).
 *
 * Run: npm run bench:matrix   (options: --rounds N  --time MS (per task and round)  --mib N  --no-matrix
 *                               --scale  --write-doc)
 */
import { median } from "../harness/util/stats.ts";
import { readFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { parseLayout } from "../harness/layout/layout.ts";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { createRequire } from "node:module";
import { parseArgs } from "node:util";
import { Bench } from "tinybench";
import type * as NativeModule from "../native/index.d.ts";
import { builtinMatrices } from "../matrix/index.ts";
import { loadSubject } from "../harness/registry/registry.ts";
import { regimeSpec } from "../harness/gradients/regimes.ts";
import { gradSpecs } from "../harness/gradients/specs.ts";
import { DTYPE_BYTES } from "../harness/backend/backend.ts";
import { getModel } from "../harness/model/models.ts";
import { numel } from "../harness/model/manifest.ts";
import { formatLayout } from "../harness/layout/layout.ts";
import { runCell } from "../harness/execute/cell.ts";
import { runMatrix } from "../harness/run/runner.ts";
import { cellId, type Cell, type Case } from "../harness/cell/cell.ts";
import { TIMING_PHASES, type CellResult, type CellTimings } from "../harness/results/types.ts";

const { values: args } = parseArgs({
  options: {
    rounds: { type: "string", default: "5" },
    time: { type: "string", default: "400" },
    mib: { type: "string" },
    "no-matrix": { type: "boolean", default: false },
    scale: { type: "boolean", default: false },
    "write-doc": { type: "boolean", default: false },
  },
});

const require = createRequire(import.meta.url);
const native = require("../native/index.cjs") as typeof NativeModule;
const SUBJECT = "bucketed";

// ---- the read-bandwidth baseline ----

function llcBytes(): number {
  try {
    const s = readFileSync("/sys/devices/system/cpu/cpu0/cache/index3/size", "utf8").trim();
    const m = /^(\d+)([KMG]?)$/.exec(s);
    if (m) return Number(m[1]) * { "": 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[m[2] as "" | "K" | "M" | "G"];
  } catch {
    // no sysfs: assume a large last-level cache
  }
  return 64 * 1024 ** 2;
}
const bwMiB = args.mib ? Number(args.mib) : Math.max(256, Math.ceil((4 * llcBytes()) / 1024 ** 2));
const bwBytes = bwMiB * 1024 ** 2;
const bwStore = new native.NativeStore("cpu", 1);
const bwId = bwStore.alloc(0, "f32", [bwBytes / 4]);
bwStore.fillValue(bwId, 1.5); // every page written, so the read pass reads memory, not the zero page
let sink = 0;
const readPass = () => {
  sink += bwStore.readPass(bwId);
};

// ---- the fixed cells ----

const cpu = builtinMatrices().cpu;
/**
 * Cases of the cpu matrix (found there, so they stay its cells): both models on six layouts of 1 to 8
 * ranks, half f32 and half bf16, every one with generated gradients that are scaled and verified.
 */
const FIXED: [layout: string, model: string, dtype: string, norm: number, regime: string][] = [
  ["single", "llama3-debug", "f32", 2, "active"],
  ["single", "deepseek-v3-debug", "f32", 2, "active"],
  ["tp2", "llama3-debug", "bf16", 1, "inactive"],
  ["tp2", "deepseek-v3-debug", "bf16", 2, "boundary"],
  ["pp2", "llama3-debug", "bf16", 2, "active"],
  ["pp2", "deepseek-v3-debug", "bf16", 1, "active"],
  ["dp_replicate2", "llama3-debug", "f32", 2, "active"],
  ["dp_replicate2", "deepseek-v3-debug", "f32", 2, "active"],
  ["dp_shard3,tp2,ep2", "llama3-debug", "bf16", 2, "active"],
  ["dp_shard3,tp2,ep2", "deepseek-v3-debug", "bf16", 1, "active"],
  ["pp2,dp_shard2,tp2,ep2", "llama3-debug", "f32", 2, "active"],
  ["pp2,dp_shard2,tp2,ep2", "deepseek-v3-debug", "f32", 2, "active"],
];

function fixedCells(): Cell[] {
  return FIXED.map(([layout, model, dtype, norm, regime]) => {
    const c = cpu.cases.find(
      (c: Case) => formatLayout(c.layout) === layout && c.model === model && c.dtype === dtype && c.normType === norm && c.regime === regime,
    );
    if (!c) throw new Error(`bench:matrix: the cpu matrix has no case ${layout} ${model} ${dtype} n${norm} ${regime}`);
    return { subject: SUBJECT, ...c };
  });
}

/** R: the bytes of one pass over the full logical gradients of the cell's reference. */
function referenceBytes(c: Cell): number {
  const spec = regimeSpec(c.regime);
  let n = 0;
  for (const p of getModel(c.model).params) if (spec.hasGrad(p.index)) n += numel(p.shape);
  return n * DTYPE_BYTES[c.dtype];
}
const referenceKey = (c: Cell) => [c.model, c.dtype, c.normType, c.regime, c.seed, c.step ?? 0].join("|");
const gradBytes = (r: CellResult) => r.memory.reduce((s, m) => s + m.gradBytes, 0);

/** Bytes each phase must touch, for gradient bytes G and reference bytes R (0 when cached). */
function phaseBytes(G: number, R: number): Record<(typeof TIMING_PHASES)[number], number> {
  return { plan: 0, reference: R, allocate: 0, generate: G, subject: 3 * G, collectives: 0, checks: G, free: 0 };
}

const fmt = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : "-");

/** time / (bytes touched / bandwidth) over every phase: the figure the closing lines print. */
function boundRatio(timings: CellTimings, bytes: Record<string, number>, bw: number): number {
  return timings.total / ((Object.values(bytes).reduce((a, b) => a + b, 0) / bw) * 1e3);
}

/** The per-phase table: ms are totals over the cells given; bytes likewise. */
function phaseTable(timings: CellTimings, bytes: Record<string, number>, bw: number) {
  const boundMs = (b: number) => (b / bw) * 1e3;
  const totalBytes = Object.values(bytes).reduce((a, b) => a + b, 0);
  const rows = TIMING_PHASES.map((phase) => ({
    phase: phase as string,
    ms: fmt(timings[phase], 1),
    "bytes (MB)": fmt(bytes[phase] / 1e6, 1),
    "bound ms": fmt(boundMs(bytes[phase]), 1),
    "time / bound": bytes[phase] > 0 ? fmt(timings[phase] / boundMs(bytes[phase])) : "-",
    "share of total": fmt(timings[phase] / boundMs(totalBytes)),
  }));
  rows.push({
    phase: "total",
    ms: fmt(timings.total, 1),
    "bytes (MB)": fmt(totalBytes / 1e6, 1),
    "bound ms": fmt(boundMs(totalBytes), 1),
    "time / bound": fmt(boundRatio(timings, bytes, bw)),
    "share of total": fmt(boundRatio(timings, bytes, bw)),
  });
  return rows;
}

const zeroTimings = (): CellTimings => ({ plan: 0, reference: 0, allocate: 0, generate: 0, subject: 0, collectives: 0, checks: 0, free: 0, total: 0 });

// ---- part 1: the fixed cells, in this thread ----

const subject = await loadSubject(SUBJECT);
const cells = fixedCells();
const options = { subject, backend: "cpu" as const, budgets: cpu.budgets };

// Cold: each cell once, its reference computed (the first cell of each reference key).
const cold = new Map<string, { ms: number; bytes: number }>();
for (const c of cells) {
  const r = await runCell(c, options);
  const key = referenceKey(c);
  if (!cold.has(key)) cold.set(key, { ms: r.timings!.reference, bytes: referenceBytes(c) });
  const failed = r.checks.filter((x) => x.status === "fail");
  if (failed.length) throw new Error(`bench:matrix: ${r.id} failed ${failed.map((x) => x.id).join(", ")}`);
}

const rounds = Number(args.rounds);
const perRound: Record<string, number[]> = { readPass: [] };
const phaseSamples = new Map<string, CellTimings[]>();
const G = new Map<string, number>();
for (const c of cells) {
  perRound[cellId(c)] = [];
  phaseSamples.set(cellId(c), []);
}
for (let round = 0; round < rounds; round++) {
  const bench = new Bench({ time: Number(args.time), warmup: round === 0 });
  bench.add("readPass", readPass);
  for (const c of cells) {
    const id = cellId(c);
    bench.add(id, async () => {
      const r = await runCell(c, options);
      phaseSamples.get(id)!.push(r.timings!);
      G.set(id, gradBytes(r));
    });
  }
  await bench.run();
  for (const task of bench.tasks) {
    const res = task.result;
    if (!res || !("latency" in res)) throw new Error(`benchmark ${task.name} did not complete (${res?.state})`);
    perRound[task.name].push(res.latency.p50 ?? res.latency.mean);
  }
}

const bwRounds = perRound.readPass.map((ms) => bwBytes / (ms / 1e3));
const bw = median(bwRounds);
// which kernels ran: the ratios differ by SIMD path (CLIP_PARITY_SIMD=avx2 measures the AVX2 one on an AVX-512 CPU)
const simdCap = process.env.CLIP_PARITY_SIMD;
console.log(`SIMD path: ${native.simdPath()}${simdCap ? ` (capped by CLIP_PARITY_SIMD=${simdCap})` : ""}; CPU ${cpus()[0]?.model ?? "unknown"}`);
console.log(
  `read bandwidth (readPass over ${bwMiB} MiB, LLC ${(llcBytes() / 1024 ** 2).toFixed(0)} MiB): ${(bw / 1e9).toFixed(1)} GB/s ` +
    `(rounds ${bwRounds.map((x) => (x / 1e9).toFixed(1)).join(", ")})`,
);

// Per cell: median total ms over rounds; per phase: median of each phase over every sample.
const sumTimings = zeroTimings();
const sumBytes: Record<string, number> = phaseBytes(0, 0);
const cellRows = cells.map((c) => {
  const id = cellId(c);
  const samples = phaseSamples.get(id)!;
  const g = G.get(id)!;
  const t = zeroTimings();
  for (const k of Object.keys(t) as (keyof CellTimings)[]) t[k] = median(samples.map((s) => s[k]));
  t.total = median(perRound[id]);
  for (const k of Object.keys(t) as (keyof CellTimings)[]) sumTimings[k] += t[k];
  const b = phaseBytes(g, 0);
  for (const k of Object.keys(b)) sumBytes[k] += b[k as keyof typeof b];
  const boundMs = ((5 * g) / bw) * 1e3;
  return {
    cell: `${formatLayout(c.layout)} ${c.model} ${c.dtype} n${c.normType} ${c.regime}`,
    "G (MB)": fmt(g / 1e6, 1),
    "ms": fmt(t.total, 1),
    "bound ms (5G)": fmt(boundMs, 1),
    "time / bound": fmt(t.total / boundMs),
  };
});
console.log(`\n${cells.length} cells of the cpu matrix, subject ${SUBJECT}, one thread, reference cached (median over ${rounds} rounds):`);
console.table(cellRows);
console.log("per phase, over those cells:");
console.table(phaseTable(sumTimings, sumBytes, bw));
let refMs = 0;
let refBytes = 0;
for (const r of cold.values()) {
  refMs += r.ms;
  refBytes += r.bytes;
}
console.log(
  `reference, cold (${cold.size} keys, once each): ${fmt(refMs, 1)} ms for ${fmt(refBytes / 1e6, 1)} MB: ` +
    `time / bound ${fmt(refMs / ((refBytes / bw) * 1e3))}`,
);

// ---- part 2: the whole cpu matrix, one subject, one worker ----

let wholeRatio: number | null = null;
/** The general-p cells' share of part 2 (p other than 1, 2, inf: |x|^p per element, abspow.rs). */
let generalRatio: { cells: number; ratio: number; reference: number } | null = null;
const isGeneralP = (p: number) => p !== 1 && p !== 2 && p !== Infinity;

if (!args["no-matrix"]) {
  const bwBefore = bwBytes / timeReadPass();
  const started = performance.now();
  const run = await runMatrix(cpu, { subjects: [SUBJECT], workers: 1, golden: "off" });
  const wallMs = performance.now() - started;
  const bwAfter = bwBytes / timeReadPass();
  const bwRun = median([bw, bwBefore, bwAfter]);
  const t = zeroTimings();
  const bytes: Record<string, number> = phaseBytes(0, 0);
  const tg = zeroTimings();
  const bytesg: Record<string, number> = phaseBytes(0, 0);
  let generalCells = 0;
  const seen = new Set<string>();
  // a cell that ended without timings (a worker lost, a cell skipped) is counted and left out of the ratios
  let untimed = 0;
  for (const r of run.results) {
    if (!r.timings) {
      untimed++;
      continue;
    }
    const general = isGeneralP(r.cell.normType);
    generalCells += general ? 1 : 0;
    for (const k of Object.keys(t) as (keyof CellTimings)[]) {
      t[k] += r.timings![k];
      if (general) tg[k] += r.timings![k];
    }
    const key = referenceKey(r.cell);
    const R = seen.has(key) ? 0 : referenceBytes(r.cell); // one worker: each reference computed once
    seen.add(key);
    const b = phaseBytes(gradBytes(r), R);
    for (const k of Object.keys(b)) {
      bytes[k] += b[k as keyof typeof b];
      if (general) bytesg[k] += b[k as keyof typeof b];
    }
  }
  const { passed, failed, skipped } = run.summary;
  console.log(
    `\nthe whole cpu matrix, subject ${SUBJECT}, runMatrix with workers: 1: ${run.results.length} cells ` +
      `(${passed} passed, ${failed} failed, ${skipped} skipped), wall ${fmt(wallMs / 1e3, 1)} s; ` +
      `bandwidth ${(bwRun / 1e9).toFixed(1)} GB/s (median of ${(bw / 1e9).toFixed(1)}, before ${(bwBefore / 1e9).toFixed(1)}, after ${(bwAfter / 1e9).toFixed(1)})`,
  );
  if (untimed) console.log(`${untimed} cells have no timings (left out of the ratios below)`);
  console.table(phaseTable(t, bytes, bwRun));
  console.log(`of which the ${generalCells} general-p cells (p not 1, 2 or inf), per phase:`);
  console.table(phaseTable(tg, bytesg, bwRun));
  if (failed) process.exitCode = 1;
  wholeRatio = boundRatio(t, bytes, bwRun);
  const refRatio = (x: CellTimings, b: Record<string, number>) => x.reference / ((b.reference / bwRun) * 1e3);
  generalRatio = { cells: generalCells, ratio: boundRatio(tg, bytesg, bwRun), reference: refRatio(tg, bytesg) };
  console.log(`reference phase, whole matrix: ${fmt(refRatio(t, bytes))} x its bound`);
}

// ---- part 2b: the general-p references, as before issue 44 and now, in this run ----

/**
 * The general-p float32 references of the cpu matrix summed both ways over the same generated values, in
 * rounds that alternate the two: the correctly rounded |x|^p (abspow.rs, what the reference computes) and
 * the C library's pow element by element (benchExactFullLibm: the definition before issue 44). The ratio of
 * the two is how much lower the reference phase of those keys is, measured in one run on one machine.
 */
let generalReference: { keys: number; bytes: number; exactMs: number; libmMs: number } | null = null;
{
  const keys = new Map<string, Case>();
  for (const c of cpu.cases) {
    if (c.dtype !== "f32" || !isGeneralP(c.normType) || regimeSpec(c.regime).special !== null) continue;
    keys.set(referenceKey({ subject: SUBJECT, ...c }), c);
  }
  const sums = [...keys.values()].flatMap((c) => {
    const model = getModel(c.model);
    const specs = gradSpecs(model, { dtype: c.dtype, regime: c.regime, seed: c.seed, step: c.step ?? 0, pp: 1 });
    const hasGrad = regimeSpec(c.regime).hasGrad;
    return model.params.filter((p) => hasGrad(p.index)).map((p) => ({ gen: specs.logical(p), count: numel(p.shape), p: c.normType }));
  });
  const bytes = sums.reduce((a, x) => a + x.count * DTYPE_BYTES.f32, 0);
  const exactMs: number[] = [];
  const libmMs: number[] = [];
  for (let k = 0; k < 3; k++) {
    for (const [times, sum] of [
      [exactMs, native.exactFull],
      [libmMs, native.benchExactFullLibm],
    ] as const) {
      const t0 = performance.now();
      for (const x of sums) sink += Number(sum(x.gen, x.count, x.p) & 1n);
      times.push(performance.now() - t0);
    }
  }
  generalReference = { keys: keys.size, bytes, exactMs: median(exactMs), libmMs: median(libmMs) };
  console.log(
    `\nthe ${keys.size} general-p float32 references (${fmt(bytes / 1e6, 1)} MB), median of 3 alternating rounds: ` +
      `correctly rounded ${fmt(generalReference.exactMs, 1)} ms, libm pow (before issue 44) ${fmt(generalReference.libmMs, 1)} ms`,
  );
}

// ---- part 3: cost against model size ----

if (args.scale) {
  const SCALE_MODELS = ["llama3-debug", "deepseek-v3-debug", "qwen3-0.6b"];
  const SCALE_ROUNDS = 3;
  const rows: { model: string; G: number; coldMs: number; warmMs: number; referenceMs: number; rssMB: number }[] = [];
  for (const model of SCALE_MODELS) {
    const c: Cell = { subject: SUBJECT, layout: parseLayout("tp8"), model, dtype: "f32", normType: 2, regime: "active", seed: 0 };
    const totals: number[] = [];
    let g = 0;
    let referenceMs = 0;
    for (let k = 0; k < SCALE_ROUNDS; k++) {
      const r = await runCell(c, { subject, backend: "cpu" });
      if (r.checks.some((x) => x.status === "fail")) throw new Error(`bench:matrix: ${r.id} failed`);
      if (k === 0) referenceMs = r.timings!.reference;
      totals.push(r.timings!.total);
      g = gradBytes(r);
    }
    rows.push({ model, G: g, coldMs: totals[0]!, warmMs: median(totals.slice(1)), referenceMs, rssMB: process.memoryUsage().rss / 1e6 });
  }
  const table = rows.map((r) => ({
    model: r.model,
    "gradient bytes (MB)": fmt(r.G / 1e6, 1),
    "cells/s (warm)": fmt(1e3 / r.warmMs, 3),
    "ms (warm)": fmt(r.warmMs, 0),
    "ms (cold, with reference)": fmt(r.coldMs, 0),
    "MB/s (warm)": fmt(r.G / 1e6 / (r.warmMs / 1e3), 0),
    "time / bound (5G)": fmt(r.warmMs / (((5 * r.G) / bw) * 1e3)),
  }));
  console.log(`\ncost against model size: one cell per model, f32 tp8 n2 active, subject ${SUBJECT}, in this thread:`);
  console.table(table);
  if (args["write-doc"]) {
    const cols = Object.keys(table[0]!);
    const md =
      "# Cell cost against model size\n\n" +
      "Generated by `npm run bench:matrix -- --scale --write-doc` (bench/matrix.ts, part 3); never edit by hand.\n" +
      `Machine: ${cpus().length} cores (${cpus()[0]?.model.trim()}), ${(totalmem() / 1024 ** 3).toFixed(0)} GiB; ` +
      `read bandwidth ${(bw / 1e9).toFixed(1)} GB/s in the same run. One cell per model: f32, tp8, 2-norm, ` +
      `regime active, subject ${SUBJECT}, run in one thread; warm = median of ${SCALE_ROUNDS - 1} runs with the ` +
      "reference cached, cold = the first run, reference included. Bound = 5 x gradient bytes / read bandwidth.\n\n" +
      `| ${cols.join(" | ")} |\n|${cols.map(() => "---").join("|")}|\n` +
      table.map((r) => `| ${Object.values(r).join(" | ")} |`).join("\n") +
      `\n\nThroughput in gradient bytes per second goes from ${fmt(rows[0]!.G / 1e3 / rows[0]!.warmMs, 0)} MB/s ` +
      `(${rows[0]!.model}) to ${fmt(rows.at(-1)!.G / 1e3 / rows.at(-1)!.warmMs, 0)} MB/s (${rows.at(-1)!.model}): ` +
      "a fixed per-cell cost (planning, the JS side of the subject and checks) dominates the debug models, the bytes the large one.\n";
    writeFileAtomic("docs/scale.md", md);
    console.log("wrote docs/scale.md");
  }
}

/** Seconds of one read pass over the baseline buffer (best of 5). */
function timeReadPass(): number {
  let best = Infinity;
  for (let k = 0; k < 5; k++) {
    const t0 = performance.now();
    readPass();
    best = Math.min(best, performance.now() - t0);
  }
  return best / 1e3;
}

bwStore.free(bwId);
if (Number.isNaN(sink)) console.log("(sink)");

// The figures to quote, last: each against the bandwidth measured in this run.
console.log(`\n${cells.length} fixed cells: ${fmt(boundRatio(sumTimings, sumBytes, bw))} x the memory-touch bound`);
if (wholeRatio !== null) console.log(`whole cpu matrix: ${fmt(wholeRatio)} x the memory-touch bound`);
if (generalRatio !== null)
  console.log(`general-p cells (${generalRatio.cells}): ${fmt(generalRatio.ratio)} x the memory-touch bound, reference phase ${fmt(generalRatio.reference)} x`);
if (generalReference !== null) {
  const bound = (generalReference.bytes / bw) * 1e3;
  console.log(
    `general-p float32 references: ${fmt(generalReference.exactMs / bound)} x their bound, ${fmt(generalReference.libmMs / bound)} x before issue 44 (libm pow): ` +
      `${fmt(generalReference.libmMs / generalReference.exactMs)} x lower`,
  );
}

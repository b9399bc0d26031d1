/**
 * Kernel benchmark of the native addon: a 64 MiB float32 tensor (16 Mi elements), filled by the
 * SPEC section 5 generator, then
 *   readPass            a plain read of every element (the memory-bandwidth baseline)
 *   sumAbsPow(p=2)      float64 accumulation of x*x
 *   exactSumAbsPow(p=2) the exact (order-independent) accumulator
 * and the ratios time(readPass) / time(kernel) against their targets.
 *
 * Run: npm run bench   (options: --mib N  --time MS (total)  --rounds N  --dtype f32|bf16|f16)
 * The ratio reported is the median over interleaved rounds of median(readPass)/median(kernel).
 */
import { median } from "../harness/util/stats.ts";
import { createRequire } from "node:module";
import { parseArgs } from "node:util";
import { Bench } from "tinybench";
import type * as NativeModule from "../native/index.d.ts";

type Native = typeof NativeModule;

const { values: args } = parseArgs({
  options: {
    mib: { type: "string", default: "64" },
    time: { type: "string", default: "9000" },
    rounds: { type: "string", default: "12" },
    dtype: { type: "string", default: "f32" },
  },
});

const require = createRequire(import.meta.url);
const native = require("../native/index.cjs") as Native;

const dtype = args.dtype as NativeModule.DType;
const size = { f32: 4, bf16: 2, f16: 2 }[dtype];
if (!size) throw new Error(`--dtype: "${args.dtype}" is not one of f32, bf16, f16`);
const mib = Number(args.mib);
const numel = (mib * 1024 * 1024) / size;

const store = new native.NativeStore("cpu", 1);
const id = store.alloc(0, dtype, [numel]);
const gen: NativeModule.GenSpec = { seed: 1234n, step: 0, name: "bench.weight", dtype, exp: 0, mode: "gen" };
const t0 = performance.now();
store.fillGrad(id, gen, { globalShape: [numel], start: [0], len: [numel] });
const fillMs = performance.now() - t0;

let sink = 0;
const kernels: Record<string, () => void> = {
  readPass: () => {
    sink += store.readPass(id);
  },
  "sumAbsPow(p=2)": () => {
    sink += store.sumAbsPow(id, 2);
  },
  "exactSumAbsPow(p=2)": () => {
    sink += Number(store.exactSumAbsPow(id, 2) & 1n);
  },
};
const targets: Record<string, number> = { "sumAbsPow(p=2)": 0.8, "exactSumAbsPow(p=2)": 0.4 };

// Interleaved rounds: each round measures every kernel, so load changes hit all of them alike.
const rounds = Number(args.rounds);
const perRound: Record<string, number[]> = Object.fromEntries(Object.keys(kernels).map((k) => [k, []]));
for (let r = 0; r < rounds; r++) {
  const bench = new Bench({
    time: Number(args.time) / rounds,
    warmup: r === 0,
  });
  for (const [name, fn] of Object.entries(kernels)) bench.add(name, fn);
  await bench.run();
  for (const task of bench.tasks) {
    const res = task.result;
    if (!res || !("latency" in res)) throw new Error(`benchmark ${task.name} did not complete (${res?.state})`);
    perRound[task.name].push(res.latency.p50 ?? res.latency.mean);
  }
}

const bytes = numel * size;
const rows = Object.keys(kernels).map((kernel) => {
  const ms = median(perRound[kernel]);
  const ratios = perRound[kernel].map((t, r) => perRound.readPass[r] / t);
  const ratio = median(ratios);
  const target = targets[kernel];
  return {
    kernel,
    "median ms": ms.toFixed(2),
    "GB/s": (bytes / (ms * 1e6)).toFixed(1),
    "readPass/kernel": ratio.toFixed(3),
    "(min..max over rounds)": `${Math.min(...ratios).toFixed(2)}..${Math.max(...ratios).toFixed(2)}`,
    target: target === undefined ? "-" : `>= ${target}`,
    ok: target === undefined ? "" : ratio >= target ? "yes" : "NO",
  };
});

console.log(
  `${mib} MiB ${dtype} tensor (${numel} elements), fill ${fillMs.toFixed(1)} ms; ` +
    `${rounds} interleaved rounds (wall clock; on a busy machine the spread is wide)`,
);
console.table(rows);
store.free(id);
if (store.liveBytes(0) !== 0) throw new Error("ledger did not return to zero");
if (Number.isNaN(sink)) console.log("(sink)");

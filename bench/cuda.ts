/**
 * Kernel benchmark of the cuda backend: one tensor in device memory (default 1 GiB), filled by the
 * SPEC section 5 generator, then in interleaved rounds
 *   copy                a device-to-device copy of the same bytes into a second tensor (the baseline)
 *   readPass            a plain read of every word
 *   sumAbsPow(p=2|1)    the float64 partial norms (the path with a target: >= 0.8)
 *   exactSumAbsPow(p=2) the exact (integer bin) partial norm
 *   maxAbs              the inf-norm partial
 *   scale(1.0)          scale in place (reads and writes every element, as the copy does)
 * Each op is timed as the harness calls it: one synchronous native call (launch, completion and the
 * result's copy to the host included). The ratio reported is the median over rounds of
 * time(copy) / time(kernel) in the same round. A copy moves twice the tensor's bytes (read +
 * write), a reduction reads them once: at full memory bandwidth a reduction's ratio is about 2.
 *
 * Run: npx tsx bench/cuda.ts [--mib 1024] [--rounds 7] [--dtype f32,bf16] [--json FILE] [--no-fail]
 *      [--allow-emulated]   (the CPU emulation: smoke test only, the numbers mean nothing)
 * Exit status 1 when a target is missed (unless --no-fail), 2 when CUDA is absent.
 */
import { median } from "../harness/util/stats.ts";
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { parseArgs } from "node:util";
import type * as NativeModule from "../native/index.d.ts";

type Native = typeof NativeModule;

const { values: args } = parseArgs({
  options: {
    mib: { type: "string", default: "1024" },
    rounds: { type: "string", default: "7" },
    dtype: { type: "string", default: "f32,bf16" },
    json: { type: "string" },
    "no-fail": { type: "boolean", default: false },
    "allow-emulated": { type: "boolean", default: false },
  },
});

const native = createRequire(import.meta.url)("../native/index.cjs") as Native;
const status = native.cudaStatus();
if (!status.present || (status.emulated && !args["allow-emulated"])) {
  console.error(`bench/cuda: ${status.present ? "the devices are the CPU emulation (pass --allow-emulated)" : `CUDA is not available here (${status.message})`}`);
  process.exit(2);
}
console.log(`cuda: ${status.message}`);

const TARGETS: Record<string, number> = { "sumAbsPow(p=2)": 0.8, "sumAbsPow(p=1)": 0.8 };

interface Row {
  dtype: string;
  kernel: string;
  ms: number;
  gbps: number;
  ratio: number;
  min: number;
  max: number;
  target?: number;
  ok?: boolean;
}

const rows: Row[] = [];
let sink = 0;
let missed = 0;
for (const dtype of args.dtype.split(",") as NativeModule.DType[]) {
  const size = { f32: 4, bf16: 2, f16: 2 }[dtype];
  if (!size) throw new Error(`--dtype: "${dtype}" is not one of f32, bf16, f16`);
  const bytes = Number(args.mib) * 1024 * 1024;
  const numel = bytes / size;
  const store = new native.NativeStore("cuda", 1);
  const a = store.alloc(0, dtype, [numel]);
  const b = store.alloc(0, dtype, [numel]);
  const t0 = performance.now();
  store.fillGrad(a, { seed: 1234n, step: 0, name: "bench.weight", dtype, exp: 0, mode: "gen" }, { globalShape: [numel], start: [0], len: [numel] });
  const fillMs = performance.now() - t0;
  const dev = store.deviceMemory(0)!;
  console.log(
    `${dtype}: ${args.mib} MiB (${numel} elements) on ${dev.device}; fill ${fillMs.toFixed(1)} ms; ` +
      `device memory free ${(dev.freeBytes / 2 ** 30).toFixed(1)} of ${(dev.totalBytes / 2 ** 30).toFixed(1)} GiB`,
  );
  // bytes moved per call, for the GB/s column
  const kernels: [string, number, () => void][] = [
    ["copy", 2 * bytes, () => store.copyFrom(b, a)],
    ["readPass", bytes, () => (sink += store.readPass(a))],
    ["sumAbsPow(p=2)", bytes, () => (sink += store.sumAbsPow(a, 2))],
    ["sumAbsPow(p=1)", bytes, () => (sink += store.sumAbsPow(a, 1))],
    ["exactSumAbsPow(p=2)", bytes, () => (sink += Number(store.exactSumAbsPow(a, 2) & 1n))],
    ["maxAbs", bytes, () => (sink += store.maxAbs(a))],
    ["scale(1.0)", 2 * bytes, () => store.scale(a, 1.0)],
  ];
  for (const [, , f] of kernels) f(); // warm up (module load, first-touch)
  const per: Record<string, number[]> = Object.fromEntries(kernels.map(([k]) => [k, []]));
  for (let r = 0; r < Number(args.rounds); r++) {
    for (const [name, , f] of kernels) {
      // enough calls for ~50 ms per measurement
      const s0 = performance.now();
      f();
      const once = performance.now() - s0;
      const reps = Math.max(1, Math.min(200, Math.ceil(50 / Math.max(once, 0.01))));
      const s = performance.now();
      for (let i = 0; i < reps; i++) f();
      per[name].push((performance.now() - s) / reps);
    }
  }
  for (const [name, moved] of kernels) {
    const ratios = per[name].map((t, r) => per.copy[r] / t);
    const ms = median(per[name]);
    const row: Row = {
      dtype,
      kernel: name,
      ms,
      gbps: moved / (ms * 1e6),
      ratio: median(ratios),
      min: Math.min(...ratios),
      max: Math.max(...ratios),
    };
    if (TARGETS[name] !== undefined) {
      row.target = TARGETS[name];
      row.ok = row.ratio >= row.target;
      if (!row.ok) missed++;
    }
    rows.push(row);
  }
  if (store.hash(a) !== store.hash(a)) throw new Error("hash is not stable");
  store.free(a);
  store.free(b);
  if (store.liveBytes(0) !== 0) throw new Error("ledger did not return to zero");
}

console.table(
  rows.map((r) => ({
    dtype: r.dtype,
    kernel: r.kernel,
    "median ms": r.ms.toFixed(3),
    "GB/s": r.gbps.toFixed(0),
    "copy/kernel": r.ratio.toFixed(3),
    "(min..max)": `${r.min.toFixed(2)}..${r.max.toFixed(2)}`,
    target: r.target === undefined ? "-" : `>= ${r.target}`,
    ok: r.ok === undefined ? "" : r.ok ? "yes" : "NO",
  })),
);
if (args.json) writeFileSync(args.json, JSON.stringify({ status, mib: Number(args.mib), rounds: Number(args.rounds), rows }, null, 2));
if (Number.isNaN(sink)) console.log("(sink)");
if (missed && !args["no-fail"]) {
  console.error(`bench/cuda: ${missed} ratio(s) below target`);
  process.exit(1);
}

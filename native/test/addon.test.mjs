// Smoke and parity tests of the built addon from JS: node --test native/test/
// (the Rust unit tests in native/core cover the kernels in depth; these check the JS surface).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { mkdtempSync, writeFileSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(import.meta.url);
const n = require("../index.cjs");

const M64 = (1n << 64n) - 1n;
function splitmix64(x) {
  x = (x + 0x9e3779b97f4a7c15n) & M64;
  let z = ((x ^ (x >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}
function fnv1a64(s) {
  let h = 0xcbf29ce484222325n;
  for (const b of new TextEncoder().encode(s)) h = ((h ^ BigInt(b)) * 0x100000001b3n) & M64;
  return h;
}
const M = { f32: 24, bf16: 8, f16: 11 };
/** SPEC section 5, written independently of the addon (exact for these exponents). */
function genValue(g, i) {
  const key = splitmix64(g.seed ^ splitmix64(BigInt(g.step) ^ fnv1a64(g.name)));
  const bits = splitmix64((key + BigInt(i)) & M64);
  const m = M[g.dtype];
  const q = Number(bits >> BigInt(64 - m)) - 2 ** (m - 1);
  return q * 2 ** (g.exp - m + 1);
}
/** exact N with value N * 2^-1074 of a finite double */
function toUnits(x) {
  if (x === 0) return 0n;
  const buf = new DataView(new ArrayBuffer(8));
  buf.setFloat64(0, Math.abs(x));
  const bits = buf.getBigUint64(0);
  const e = Number(bits >> 52n);
  const frac = bits & ((1n << 52n) - 1n);
  return e === 0 ? frac : (frac | (1n << 52n)) << BigInt(e - 1);
}

const gen = (over = {}) => ({ seed: 42n, step: 3, name: "layers.0.mlp.w", dtype: "f32", exp: 0, mode: "gen", ...over });
const full = (shape) => ({ globalShape: shape, start: shape.map(() => 0), len: shape });

test("fixed vectors and the generator match an independent JS implementation", () => {
  assert.equal(n.splitmix64(0n), 0xe220a8397b1dcdafn);
  assert.equal(n.fnv1a64(""), 0xcbf29ce484222325n);
  assert.equal(n.fnv1a64("a"), 0xaf63dc4c8601ec8cn);
  assert.equal(n.splitmix64(12345n), splitmix64(12345n));
  for (const dtype of ["f32", "bf16", "f16"]) {
    const g = gen({ dtype, exp: 2 });
    const v = n.genValues(g, 1000, 64);
    for (let k = 0; k < 64; k++) assert.equal(v[k], genValue(g, 1000 + k), `${dtype} ${k}`);
  }
});

test("fillGrad of a shard equals the global values; exact sums match BigInt and exactFull", () => {
  const s = new n.NativeStore("cpu", 2);
  for (const dtype of ["f32", "bf16", "f16"]) {
    const g = gen({ dtype, specialIndex: 7 * 9 + 4, specialValue: Infinity });
    const block = { globalShape: [10, 9], start: [3, 2], len: [5, 6] };
    const id = s.alloc(1, dtype, [5, 6]);
    s.fillGrad(id, g, block);
    let want2 = 0n;
    let want1 = 0n;
    for (let r = 0; r < 5; r++)
      for (let c = 0; c < 6; c++) {
        const gi = (3 + r) * 9 + 2 + c;
        const x = s.getElement(id, r * 6 + c);
        assert.equal(x, gi === 67 ? Infinity : genValue(g, gi));
        if (Number.isFinite(x)) {
          want2 += toUnits(x * x);
          want1 += toUnits(Math.abs(x));
        }
      }
    assert.equal(s.exactSumAbsPow(id, 2), want2);
    assert.equal(s.exactSumAbsPow(id, 1), want1);
    assert.equal(s.nonFiniteCount(id), 1);
    assert.equal(s.maxAbs(id), Infinity);
    const fid = s.alloc(0, dtype, [10, 9]);
    s.fillGrad(fid, g, full([10, 9]));
    assert.equal(n.exactFull(g, 90, 2), s.exactSumAbsPow(fid, 2));
    assert.equal(n.exactFull(g, 90, 3), s.exactSumAbsPow(fid, 3));
    assert.equal(n.maxAbsFull(g, 90), s.maxAbs(fid));
    s.free(id);
    s.free(fid);
  }
  assert.equal(s.liveBytes(0) + s.liveBytes(1), 0);
});

test("ledger, meta store and scale/verify", () => {
  const s = new n.NativeStore("cpu", 2);
  const a = s.alloc(0, "f32", [3, 5]);
  const b = s.alloc(0, "bf16", [7]);
  assert.equal(s.liveBytes(0), 74);
  s.free(a);
  assert.equal(s.peakBytes(0), 74);
  s.resetPeak(0);
  assert.equal(s.peakBytes(0), 14);
  s.fillGrad(b, gen({ dtype: "bf16" }), full([7]));
  s.scale(b, 0.37);
  assert.equal(s.verifyScaled(b, gen({ dtype: "bf16" }), full([7]), 0.37), null);
  const mm = s.verifyScaled(b, gen({ dtype: "bf16" }), full([7]), 0.38);
  assert.equal(mm.index, 0);
  s.free(b);
  const meta = new n.NativeStore("meta", 16);
  assert.equal(meta.backend, "meta");
  const big = meta.alloc(3, "bf16", [30532122624]);
  assert.equal(meta.liveBytes(3), 61064245248);
  meta.fillGrad(big, gen({ dtype: "bf16" }), full([30532122624]));
  assert.equal(meta.sumAbsPow(big, 2), 0);
  assert.equal(meta.exactSumAbsPow(big, 2), 0n);
  assert.equal(meta.hash(big), "meta");
  meta.free(big);
  assert.equal(meta.liveTensors(), 0);
});

test("allocFillMany equals alloc + fillGrad; verifyScaledMany reports the first mismatch in list order", () => {
  for (const backend of ["cpu", "meta"]) {
    const s = new n.NativeStore(backend, 2);
    const blocks = [full([7, 9]), { globalShape: [10, 40], start: [2, 5], len: [3, 33] }, full([]), full([0, 4])];
    const items = blocks.map((block, k) => ({ shape: block.len, gen: gen({ name: `p${k}`, dtype: "bf16" }), block }));
    items[1].gen.specialIndex = 2 * 40 + 6;
    items[1].gen.specialValue = NaN;
    const ids = s.allocFillMany(1, "bf16", items);
    assert.equal(ids.length, 4);
    assert.equal(s.liveBytes(1), 2 * (63 + 99 + 1 + 0));
    for (const [k, id] of ids.entries()) {
      const ref = s.alloc(0, "bf16", items[k].shape);
      s.fillGrad(ref, items[k].gen, items[k].block);
      assert.equal(s.hash(id), s.hash(ref), `item ${k}`);
      assert.deepEqual(s.shape(id), items[k].shape);
      assert.equal(s.owner(id), 1);
      s.free(ref);
      s.scale(id, 0.3);
    }
    const checks = (coef) => ids.map((id, k) => ({ id, gen: items[k].gen, block: items[k].block, coef }));
    assert.equal(s.verifyScaledMany(checks(0.3)), null);
    assert.equal(s.verifyScaledMany([]), null);
    if (backend === "cpu") {
      s.setElement(ids[1], 7, 5);
      s.setElement(ids[0], 60, 5);
      const r = s.verifyScaledMany(checks(0.3));
      assert.equal(r.item, 0);
      assert.deepEqual(r.mismatch, s.verifyScaled(ids[0], items[0].gen, items[0].block, 0.3));
      assert.equal(r.mismatch.index, 60);
      assert.equal(r.mismatch.actual, 5);
    }
    // errors name the item and the field; a failing allocFillMany leaves nothing allocated
    const before = s.liveTensors();
    const bad = (k, over) => items.map((it, j) => (j === k ? { ...it, ...over } : it));
    const cases = [
      [() => s.allocFillMany(0, "bf16", bad(2, { gen: { ...items[2].gen, seed: 1 } })), /^items\[2\]\.gen\.seed: expected a bigint, got a number$/],
      [() => s.allocFillMany(0, "bf16", bad(1, { shape: [3, -1] })), /^items\[1\]\.shape\[1\]: -1 is not a non-negative integer/],
      [() => s.allocFillMany(0, "bf16", bad(3, { block: { globalShape: [4], start: [3], len: [2] } })), /^items\[3\]: block: dim 0: start 3 \+ len 2 exceeds/],
      [() => s.allocFillMany(0, "bf16", bad(3, { shape: [5] })), /^items\[3\]: allocFill: block len \[0, 4\] has 0 elements but shape \[5\] has 5$/],
      [() => s.allocFillMany(0, "bf16", bad(0, { gen: undefined })), /^items\[0\]\.gen: missing \(expected an object\)$/],
      [() => s.allocFillMany(0, "bf16", {}), /^items: expected an array, got an object$/],
      [() => s.allocFillMany(2, "bf16", items), /^rank: 2 is out of range/],
      [() => s.verifyScaledMany(checks(0.3).map((c, j) => (j === 1 ? { ...c, id: 0 } : c))), /^items\[1\]\.id: 0 is not a tensor id/],
      [() => s.verifyScaledMany(checks(0.3).map((c, j) => (j === 1 ? { ...c, coef: "1" } : c))), /^items\[1\]\.coef: expected a number, got a string$/],
      // items before the bad one pass: the loop reaches it (a mismatch before it would be the result)
      [() => s.verifyScaledMany(checks(0.3).slice(2).map((c, j) => (j === 1 ? { ...c, id: 999 } : c))), /^items\[1\]: id 999: no such tensor$/],
    ];
    for (const [f, re] of cases) assert.throws(f, (e) => re.test(e.message) || assert.fail(`${e.message} !~ ${re}`), `${backend}: ${re}`);
    assert.equal(s.liveTensors(), before);
    for (const id of ids) s.free(id);
    assert.equal(s.liveBytes(1), 0);
  }
});

test("errors name the field and the value; no panic reaches JS", () => {
  const s = new n.NativeStore("cpu", 1);
  const id = s.alloc(0, "f32", [4]);
  const cases = [
    [() => s.alloc(0, "f64", [1]), /dtype: "f64" is not one of f32, bf16, f16/],
    [() => new n.NativeStore("gpu", 1), /backend: "gpu" is not one of cpu, meta/],
    [() => s.free(99), /id 99: no such tensor/],
    [() => s.fillGrad(id, gen({ seed: 1 }), full([4])), /gen\.seed: expected a bigint, got a number/],
    [() => s.fillGrad(id, gen({ mode: "rand" }), full([4])), /gen\.mode: "rand" is not one of gen, ones, zeros/],
    [() => s.fillGrad(id, gen({ sumOf: "a.w" }), full([4])), /gen\.sumOf: expected an array of strings, got a string$/],
    [() => s.fillGrad(id, gen({ sumOf: ["a.w", 3] }), full([4])), /gen\.sumOf\[1\]: expected a string, got a number$/],
    [() => s.sumTensors(id, [id, 99]), /id 99: no such tensor/],
    [() => s.fillGrad(id, gen(), { globalShape: [4], start: [1], len: [4] }), /start 1 \+ len 4 exceeds/],
    [() => s.fillGrad(id, gen(), full([5])), /block len \[5\] has 5 elements but tensor/],
    [() => s.narrow(id, 1, 0, 1, 0), /dim: 1 is out of range/],
    [() => s.sumAbsPow(id, Infinity), /p: inf must be a finite number > 0/],
    [() => s.alloc(0, "f32", [2 ** 50]), /cannot allocate|out of memory/],
    [() => n.splitmix64(-1n), /x: -1n is not a u64/],
  ];
  for (const [f, re] of cases) assert.throws(f, re);
  s.free(id);
  assert.throws(() => s.free(id), /id \d+: tensor was already freed/);
});

test("a store whose call panicked refuses every later call, naming the panic; another store goes on", () => {
  const other = new n.NativeStore("cpu", 1);
  process.env.CLIP_PARITY_NATIVE_TEST_PANIC = "scale"; // read when a store is opened
  let s;
  try {
    s = new n.NativeStore("cpu", 1);
  } finally {
    delete process.env.CLIP_PARITY_NATIVE_TEST_PANIC;
  }
  const id = s.alloc(0, "f32", [4]);
  assert.throws(() => s.scale(id, 0.5), /^Error: scale: internal error in clip-parity-native \(panic: CLIP_PARITY_NATIVE_TEST_PANIC=scale\); this store refuses further calls$/);
  const unusable = /this store is unusable after an internal error in an earlier call \(scale panicked: CLIP_PARITY_NATIVE_TEST_PANIC=scale\); open a new one/;
  assert.throws(() => s.free(id), new RegExp(`^Error: free: ${unusable.source}`));
  assert.throws(() => s.liveBytes(0), unusable);
  assert.throws(() => s.alloc(0, "f32", [1]), unusable);
  const j = other.alloc(0, "f32", [4]);
  other.scale(j, 0.5);
  other.free(j);
  assert.equal(other.liveBytes(0), 0);
});

test("safetensors round trip, inspect, metadata and refusals", () => {
  const dir = mkdtempSync(join(tmpdir(), "clip-parity-native-"));
  const s = new n.NativeStore("cpu", 2);
  const ids = ["f32", "bf16", "f16"].map((dtype, k) => {
    const id = s.alloc(0, dtype, [2, 3 + k]);
    s.fillGrad(id, gen({ dtype, name: `w${k}` }), full([2, 3 + k]));
    return { name: `model.w${k}`, id };
  });
  const path = join(dir, "rank0.safetensors");
  s.saveSafetensors(path, ids, { step: "7" });
  assert.deepEqual(readdirSync(dir), ["rank0.safetensors"]);
  assert.deepEqual(
    s.inspectSafetensors(path).map((e) => [e.name, e.dtype, e.shape]),
    [["model.w0", "f32", [2, 3]], ["model.w1", "bf16", [2, 4]], ["model.w2", "f16", [2, 5]]],
  );
  assert.deepEqual(s.safetensorsMetadata(path), { step: "7" });
  const loaded = s.loadSafetensors(path, 1);
  for (let k = 0; k < 3; k++) {
    assert.equal(loaded[k].name, ids[k].name);
    assert.equal(s.compare(ids[k].id, loaded[k].id), null);
    assert.equal(s.owner(loaded[k].id), 1);
  }
  const bytes = readFileSync(path);
  writeFileSync(join(dir, "trunc.safetensors"), bytes.subarray(0, bytes.length - 3));
  const before = s.liveTensors();
  assert.throws(() => s.loadSafetensors(join(dir, "trunc.safetensors"), 0), /trunc\.safetensors: .*beyond the data section/);
  assert.equal(s.liveTensors(), before);
  const meta = new n.NativeStore("meta", 1);
  assert.throws(() => meta.loadSafetensors(path, 0), /meta store/);
});

test("cudaStatus never throws", () => {
  const st = n.cudaStatus();
  assert.equal(typeof st.present, "boolean");
  assert.equal(typeof st.emulated, "boolean");
  assert.ok(st.message.length > 0);
});

test("without CUDA, a cuda store is refused with the status message; deviceMemory is null off cuda", () => {
  assert.equal(new n.NativeStore("cpu", 1).deviceMemory(0), null);
  assert.throws(() => new n.NativeStore("cpu", 1).deviceMemory(1), /rank: 1 is out of range/);
  assert.throws(() => new n.NativeStore("gpu", 1), /backend: "gpu" is not one of cpu, meta, cuda/);
  const st = n.cudaStatus();
  if (st.present) return;
  assert.throws(() => new n.NativeStore("cuda", 2), (e) => e.message === st.message);
});

test("a store shared with another thread: the same tensors and ledgers, opened once by its ticket", async () => {
  const { Worker } = await import("node:worker_threads");
  const s = new n.NativeStore("cpu", 2);
  const id = s.alloc(1, "f32", [3]);
  s.setElement(id, 2, 5.5);
  const ticket = s.share();
  // another thread's addon instance (its own classes and prototypes) reads and writes the same tables
  const code = `
    const { parentPort, workerData } = require("node:worker_threads");
    const n = require(workerData.addon);
    const t = n.NativeStore.openShared(workerData.ticket);
    const seen = { owner: t.owner(workerData.id), value: t.getElement(workerData.id, 2), live: t.liveBytes(1) };
    t.setElement(workerData.id, 0, 7);
    parentPort.postMessage(seen);`;
  const seen = await new Promise((resolve, reject) => {
    const w = new Worker(code, { eval: true, workerData: { addon: require.resolve("../index.cjs"), ticket, id } });
    w.once("message", resolve);
    w.once("error", reject);
  });
  assert.deepEqual(seen, { owner: 1, value: 5.5, live: 12 });
  assert.equal(s.getElement(id, 0), 7);
  assert.throws(() => n.NativeStore.openShared(ticket), /no store is offered under "store-\d+-\d+" \(never shared, or already opened\)/);
  const unused = s.share();
  assert.equal(n.NativeStore.withdraw(unused), true);
  assert.throws(() => n.NativeStore.openShared(unused), /no store is offered/);
  s.free(id);
  assert.equal(s.liveBytes(1), 0);
});

test("simdPath names the kernels' SIMD path; CLIP_PARITY_SIMD caps it, never raises it", async () => {
  const { execFileSync } = await import("node:child_process");
  const PATHS = ["portable", "avx2", "avx512"];
  const best = n.simdPath();
  assert.ok(PATHS.includes(best), best);
  const under = (cap) =>
    execFileSync(process.execPath, ["-e", `process.stdout.write(require(${JSON.stringify(require.resolve("../index.cjs"))}).simdPath())`], { env: { ...process.env, CLIP_PARITY_SIMD: cap }, encoding: "utf8" });
  assert.equal(under("portable"), "portable");
  for (const cap of PATHS) assert.equal(under(cap), PATHS[Math.min(PATHS.indexOf(cap), PATHS.indexOf(best))], cap);
});

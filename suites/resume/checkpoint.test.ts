/**
 * The checkpoint format (docs/checkpoint.md): how it is written, every refusal with its message (each
 * before any tensor changes), the Python reader of the docs, and the `resume` command's exit status.
 */
import { cpSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, truncateSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Backend } from "../../harness/backend/backend.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { ClipParityError } from "../../harness/errors.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { getModel } from "../../harness/model/models.ts";
import { CheckpointError } from "../../harness/training/errors.ts";
import { freeState, initState, trainSteps, type TrainConfig } from "../../harness/training/train.ts";
import type { TrainState } from "../../harness/judge/train-state.ts";
import { readCheckpoint, restoreCheckpoint, saveCheckpoint, sha256File, type CheckpointIndex, type Expectation } from "../../harness/training/checkpoint.ts";
import { compareStates } from "../../harness/judge/state-compare.ts";
import { scratchRoot } from "../../harness/util/scratch.ts";

const model = getModel("llama3-debug");
const cfg: TrainConfig = { subject: BUILTIN_SUBJECTS.exact!, model, dtype: "f32", normType: 2, regime: "active", seed: 0 };
const info = { ...cfg, subject: "exact" };
const expectLlama: Expectation = { model, dtype: "f32", seed: 0 };

let root: string;
let fixture: string; // llama3-debug after 1 step, written from pp2,tp2 (4 shards)
let single: string; // the same run, written from one rank
let fixtureIndex: CheckpointIndex;

beforeAll(async () => {
  root = mkdtempSync(join(scratchRoot(), "clip-parity-ckpt-test-"));
  fixture = join(root, "fixture");
  single = join(root, "single");
  for (const [dir, layout] of [
    [fixture, "pp2,tp2"],
    [single, "single"],
  ] as const) {
    const backend = new Backend("cpu", 4);
    const s = initState(backend, parseLayout(layout), cfg);
    await trainSteps(backend, s, cfg, 1);
    const index = saveCheckpoint(backend, s, dir, info);
    if (dir === fixture) fixtureIndex = index;
    freeState(backend, s);
  }
});

afterAll(() => {
  if (root) rmSync(root, { recursive: true, force: true });
});

let copies = 0;
function copyFixture(): string {
  const dir = join(root, `copy-${copies++}`);
  cpSync(fixture, dir, { recursive: true });
  return dir;
}

/** Restores `dir` into a fresh tp2 state; returns the error, after checking that nothing changed. */
function refuse(dir: string, expectation: Expectation = expectLlama): CheckpointError {
  const backend = new Backend("cpu", 2);
  const s = initState(backend, parseLayout("tp2"), cfg);
  const hashes = () => s.ranks.flatMap((copies) => copies.flatMap((c) => [c.param, c.expAvg, c.expAvgSq].map((t) => backend.hash(t))));
  const before = hashes();
  const live = [backend.liveBytes(0), backend.liveBytes(1), backend.liveTensorCount()];
  let error: unknown;
  try {
    restoreCheckpoint(backend, dir, expectation, s);
  } catch (err) {
    error = err;
  }
  expect(error).toBeInstanceOf(CheckpointError);
  expect(error).toBeInstanceOf(ClipParityError);
  expect((error as CheckpointError).code).toBe("E_CHECKPOINT");
  expect((error as CheckpointError).exitCode).toBe(2);
  // refused before any tensor changed, and nothing was left allocated
  expect(hashes()).toEqual(before);
  expect([backend.liveBytes(0), backend.liveBytes(1), backend.liveTensorCount()]).toEqual(live);
  expect(s.ranks.flat().every((c) => c.steps === 0)).toBe(true);
  freeState(backend, s);
  return error as CheckpointError;
}

describe("writing", () => {
  it("writes one file per rank and index.json, and nothing else", () => {
    expect(readdirSync(fixture).sort()).toEqual(["index.json", "rank-00000.safetensors", "rank-00001.safetensors", "rank-00002.safetensors", "rank-00003.safetensors"]);
    expect(fixtureIndex.step).toBe(1);
    expect(fixtureIndex.layoutSpec).toBe("pp2,tp2");
    expect(fixtureIndex.files.map((f) => f.sha256)).toEqual(fixtureIndex.files.map((f) => sha256File(join(fixture, f.file))));
    expect(Object.keys(fixtureIndex.tensors)).toEqual(model.params.map((p) => p.name));
    expect(Object.values(fixtureIndex.tensors).every((t) => t.optimizerStep === 1)).toBe(true);
    // every chunk of every tensor written exactly once (tp-replicated norms by one rank only)
    const norm = fixtureIndex.files.flatMap((f) => f.chunks.filter((c) => c.key === "param/norm.weight").map(() => f.rank));
    expect(norm).toEqual([2]);
    const backend = new Backend("cpu", 1);
    expect(backend.safetensorsMetadata(join(fixture, "rank-00003.safetensors"))).toEqual({
      format: "clip-parity-checkpoint",
      version: "1",
      rank: "3",
      step: "1",
      model: "llama3-debug",
      layout: "pp2,tp2",
    });
  });

  it("writes a tied parameter once, under its canonical name, with every physical copy listed", async () => {
    const ds = getModel("deepseek-v3-debug");
    const c2 = { ...cfg, model: ds };
    const backend = new Backend("cpu", 2);
    const s = initState(backend, parseLayout("pp2"), c2);
    const dir = join(root, "tied");
    const index = saveCheckpoint(backend, s, dir, { ...c2, subject: "exact" });
    freeState(backend, s);
    expect(index.tensors["tok_embeddings.weight"]!.copies).toEqual(["tok_embeddings.weight", "mtp.0.embed_tokens.weight"]);
    const keys = index.files.flatMap((f) => f.chunks.map((c) => c.key));
    expect(keys.filter((k) => k.includes("embed"))).toEqual(["param/tok_embeddings.weight", "exp_avg/tok_embeddings.weight", "exp_avg_sq/tok_embeddings.weight"]);
    expect(index.files[0]!.chunks.some((c) => c.name === "tok_embeddings.weight")).toBe(true);
  });

  it("rewrites a directory atomically: old shards of another layout are removed, no temporary files stay", async () => {
    const dir = copyFixture();
    const backend = new Backend("cpu", 1);
    const s = initState(backend, parseLayout("single"), cfg);
    saveCheckpoint(backend, s, dir, info);
    freeState(backend, s);
    expect(readdirSync(dir).sort()).toEqual(["index.json", "rank-00000.safetensors"]);
    expect(readCheckpoint(backend, dir, expectLlama).step).toBe(0);
  });
});

describe("refusals: each names the file and the problem, before any tensor changes", () => {
  it("a truncated file", () => {
    const dir = copyFixture();
    const f = fixtureIndex.files[1]!;
    truncateSync(join(dir, f.file), f.bytes - 1000);
    const e = refuse(dir);
    expect(e.problem).toBe("truncated");
    expect(e.file).toBe(join(dir, "rank-00001.safetensors"));
    expect(e.message).toBe(`checkpoint refused (truncated): ${dir}/rank-00001.safetensors: ${f.bytes - 1000} bytes on disk; index.json records ${f.bytes}`);
  });

  it("a header that lies about offsets", () => {
    const dir = copyFixture();
    const path = join(dir, "rank-00002.safetensors");
    const bytes = readFileSync(path);
    const n = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + n).toString("utf8")) as Record<string, { data_offsets?: [number, number] }>;
    const byOffset = Object.entries(header).filter(([k]) => k !== "__metadata__").sort((a, b) => a[1].data_offsets![0] - b[1].data_offsets![0]);
    const [victim, entry] = byOffset[1]!;
    const [begin, end] = entry.data_offsets!;
    entry.data_offsets = [begin - 4, end - 4]; // overlaps the tensor before it
    const text = JSON.stringify(header);
    expect(text.length).toBeLessThanOrEqual(n);
    const fd = openSync(path, "r+");
    writeSync(fd, Buffer.from(text.padEnd(n, " ")), 0, n, 8);
    closeSync(fd);
    const e = refuse(dir);
    expect(e.problem).toBe("bad-header");
    expect(e.message).toBe(
      `checkpoint refused (bad-header): ${path}: invalid safetensors header: tensor '${victim}': data_offsets [${begin - 4}, ${end - 4}] ` +
        `overlap the previous tensor (which ends at ${begin})`,
    );
  });

  it("a checksum mismatch", () => {
    const dir = copyFixture();
    const f = fixtureIndex.files[0]!;
    const path = join(dir, f.file);
    const fd = openSync(path, "r+");
    const last = readFileSync(path).subarray(f.bytes - 1);
    writeSync(fd, Buffer.from([last[0]! ^ 0x40]), 0, 1, f.bytes - 1); // one bit of one parameter
    closeSync(fd);
    const e = refuse(dir);
    expect(e.problem).toBe("checksum");
    expect(e.message).toBe(`checkpoint refused (checksum): ${path}: sha256 ${sha256File(path)}; index.json records ${f.sha256}`);
  });

  it("a missing shard", () => {
    const dir = copyFixture();
    rmSync(join(dir, "rank-00003.safetensors"));
    const e = refuse(dir);
    expect(e.problem).toBe("missing-shard");
    expect(e.message).toBe(`checkpoint refused (missing-shard): ${dir}/rank-00003.safetensors: listed in index.json (rank 3) but not on disk`);
  });

  it("a model that does not match", () => {
    const e = refuse(fixture, { ...expectLlama, model: getModel("deepseek-v3-debug") });
    expect(e.problem).toBe("model-mismatch");
    expect(e.message).toBe(`checkpoint refused (model-mismatch): ${fixture}/index.json: written for model llama3-debug; this run is for deepseek-v3-debug`);
  });

  it("a dtype that does not match", () => {
    const e = refuse(fixture, { ...expectLlama, dtype: "bf16" });
    expect(e.problem).toBe("dtype-mismatch");
    expect(e.message).toBe(`checkpoint refused (dtype-mismatch): ${fixture}/index.json: written by a run with f32 gradients; this run has bf16 gradients`);
  });

  it("an interrupted write (no index.json), a seed, layout or step that does not match, a lost chunk", () => {
    const dir = copyFixture();
    rmSync(join(dir, "index.json"));
    expect(refuse(dir).message).toBe(`checkpoint refused (bad-index): ${dir}/index.json: no index.json (not a checkpoint, or its writing was interrupted)`);
    expect(refuse(fixture, { ...expectLlama, seed: 7 }).message).toMatch(/\(run-mismatch\): .*index\.json: written by a run with seed 0; this run has seed 7$/);
    expect(refuse(fixture, { ...expectLlama, layout: parseLayout("tp4") }).message).toMatch(/\(run-mismatch\): .*: written from layout pp2,tp2; expected tp4$/);
    expect(refuse(fixture, { ...expectLlama, step: 3 }).message).toMatch(/\(run-mismatch\): .*: written after step 1; this run resumes at step 3$/);
    const lost = copyFixture();
    const index = JSON.parse(readFileSync(join(lost, "index.json"), "utf8")) as CheckpointIndex;
    index.files[1]!.chunks = index.files[1]!.chunks.filter((c) => c.key !== "exp_avg/layers.0.attention.wq.weight");
    const fd = openSync(join(lost, "index.json"), "w");
    writeSync(fd, JSON.stringify(index));
    closeSync(fd);
    expect(refuse(lost).message).toBe(
      `checkpoint refused (missing-chunk): ${lost}/index.json: the chunks of "exp_avg/layers.0.attention.wq.weight" hold 32768 of its 65536 elements ` +
        "(shape [256, 256]): a shard's chunk list is missing",
    );
  });
});

describe("loading", () => {
  it("restores the same state into any layout: pp2,tp2 and single checkpoints load into tp4 alike", () => {
    const backend = new Backend("cpu", 4);
    const a = initState(backend, parseLayout("tp4"), cfg);
    const b = initState(backend, parseLayout("tp4"), cfg);
    restoreCheckpoint(backend, fixture, expectLlama, a);
    restoreCheckpoint(backend, single, expectLlama, b);
    const d = compareStates(backend, a, b);
    expect(d.differences).toEqual([]);
    expect(d.tensors).toBe(a.ranks.flat().length * 3);
    expect(a.step).toBe(1);
    expect(a.ranks.flat().every((c) => c.steps === 1)).toBe(true);
    freeState(backend, a);
    freeState(backend, b);
  });
});

const python = spawnSync("python3", ["--version"]).status === 0;

describe.skipIf(!python)("the Python reader of docs/checkpoint.md", () => {
  it("reassembles every tensor of a 4-rank checkpoint bitwise equal to a 1-rank one, and sees a different state", async () => {
    const doc = readFileSync("docs/checkpoint.md", "utf8");
    const script = /```python\n([\s\S]*?)```/.exec(doc)![1]!;
    const path = join(root, "read_checkpoint.py");
    const fd = openSync(path, "w");
    writeSync(fd, script);
    closeSync(fd);
    const same = spawnSync("python3", [path, fixture, single], { encoding: "utf8" });
    expect(same.stderr).toBe("");
    expect(same.stdout.trim()).toBe(`${model.params.length} tensors x 3 roles: equal`);
    expect(same.status).toBe(0);
    const listing = spawnSync("python3", [path, fixture], { encoding: "utf8" });
    expect(listing.stdout).toContain("llama3-debug after step 1, written from pp2,tp2");
    expect(listing.stdout).toContain("  tok_embeddings.weight [2048, 256] step 1 param[0] ");

    // a checkpoint of a different state (one more step, from two ranks) differs
    const other = join(root, "other");
    const backend = new Backend("cpu", 2);
    const s: TrainState = initState(backend, parseLayout("tp2"), cfg);
    await trainSteps(backend, s, cfg, 2);
    saveCheckpoint(backend, s, other, info);
    freeState(backend, s);
    const diff = spawnSync("python3", [path, fixture, other], { encoding: "utf8" });
    expect(diff.status).toBe(1);
    expect(diff.stdout).toMatch(/tok_embeddings\.weight: optimizer step 1 vs 2/);
    expect(diff.stdout).toMatch(/tok_embeddings\.weight param: element 0 differs/);
  });
});

describe("clip-parity resume", () => {
  const cli = (...args: string[]) => execa("node", ["bin/clip-parity.js", "resume", ...args], { reject: false, env: { CI: "" } });
  const common = ["--subject", "exact", "--model", "llama3-debug", "--dtype", "f32", "--steps", "2"];

  it("resumes from an existing checkpoint in another layout (exit 0), and refuses a truncated one (exit 2)", async () => {
    const ok = await cli(...common, "--resume-layout", "dp_shard2,tp2", "--dir", fixture, "--from-existing");
    expect(ok.exitCode, ok.stderr + ok.stdout).toBe(0);
    expect(ok.stdout).toContain("exact/pp2,tp2->dp_shard2,tp2/llama3-debug/f32/n2/active/s0/T2/k1");
    expect(ok.stdout).toMatch(/pass resume\.equal: \d+ tensors \(\d+ elements\) and every optimizer step count bitwise equal; resumed at step 1 of 2 in dp_shard2,tp2 from a checkpoint written in pp2,tp2/);
    const dir = copyFixture();
    truncateSync(join(dir, "rank-00000.safetensors"), 100);
    const bad = await cli(...common, "--dir", dir, "--from-existing");
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toContain(`clip-parity: checkpoint refused (truncated): ${dir}/rank-00000.safetensors: 100 bytes on disk; index.json records`);
    const wrongModel = await cli(...common.map((a) => (a === "llama3-debug" ? "deepseek-v3-debug" : a)), "--dir", fixture, "--from-existing");
    expect(wrongModel.exitCode).toBe(2);
    expect(wrongModel.stderr).toContain("(model-mismatch)");
  });

  it("writes the checkpoint to --dir, exits 1 on a known-bad loader, 2 on bad flags", async () => {
    const dir = join(root, "cli-dir");
    const json = join(root, "cli.json");
    const r = await cli(...common, "--layout", "pp2", "--save-at", "1", "--dir", dir, "--loader", "drop-step", "--json", json);
    expect(r.exitCode, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/fail resume\.equal: .*\n.*optimizer step count 1 after resuming; uninterrupted run: 2/);
    expect(existsSync(join(dir, "index.json"))).toBe(true);
    const j = JSON.parse(readFileSync(json, "utf8"));
    expect(j.summary).toEqual({ cells: 1, passed: 0, failed: 1, skipped: 0 });
    expect(j.results[0].checks[0].id).toBe("resume.equal");
    for (const [args, message] of [
      [["--layout", "pp2", "--save-at", "3"], /save-at: 3 must be an integer from 0 to steps \(2\)/],
      [["--layout", "pp2", "--loader", "nope"], /--loader: "nope" is not one of correct, drop-step, drop-tied/],
      [["--layout", "pp2", "--from-existing"], /--from-existing needs --dir/],
      [["--dir", join(root, "nowhere"), "--from-existing"], /checkpoint refused \(bad-index\): .*nowhere\/index\.json: no such directory/],
    ] as const) {
      const bad = await cli(...common, ...args);
      expect(bad.exitCode, bad.stderr).toBe(2);
      expect(bad.stderr).toMatch(message);
    }
  });
});

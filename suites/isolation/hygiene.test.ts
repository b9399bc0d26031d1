/**
 * What a job creates is owned and cleaned by the main thread, and bad environment is one line, exit 2
 * (issue 41). Each test failed on the code before (seen): a subject that exits or hangs after resume's
 * checkpoint left the checkpoint in the scratch folder (also on SIGINT), CLIP_PARITY_SCRATCH naming a file
 * was the subject's isolation failure, CLIP_PARITY_FUZZ_SEED=abc a stack trace with exit 1, and
 * `--golden update` with the golden folder a file ran the whole matrix before crashing.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { until } from "../processes.ts";
import { ROOT } from "./run-cli.ts";

const S = (name: string) => `./suites/isolation/subjects/${name}`;
const RESUME = ["resume", "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f32", "--steps", "2", "--save-at", "1"];

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** The command line with these variables set (and no other CLIP_PARITY_ one); `whileRunning` may signal it. */
function clipParity(args: string[], vars: Record<string, string>, whileRunning?: (pid: number) => Promise<void>): Promise<Ended> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith("CLIP_PARITY_") || k === "CI") delete env[k];
  Object.assign(env, vars);
  const child = spawn(process.execPath, ["bin/clip-parity.js", ...args], { cwd: ROOT, env });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  if (whileRunning) void whileRunning(child.pid!);
  return new Promise((done) => child.on("close", (code, signal) => done({ code, signal, stdout, stderr })));
}

const scratchFolder = () => mkdtempSync(join(tmpdir(), "cp-scratch-"));
const aFile = () => {
  const f = join(mkdtempSync(join(tmpdir(), "cp-file-")), "not-a-folder");
  writeFileSync(f, "x");
  return f;
};

/** Every file below `dir`, as paths relative to it. */
function filesBelow(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1));
}


describe("resume's scratch checkpoint is removed however the job ends", () => {
  it("a subject that exits after the save: isolation fails, the scratch folder is empty", { timeout: 120_000 }, async () => {
    const scratch = scratchFolder();
    const r = await clipParity([...RESUME, "--subject", S("exits-after-save.js")], { CLIP_PARITY_SCRATCH: scratch });
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toMatch(/isolation: the subject called process\.exit\(3\)/);
    expect(readdirSync(scratch)).toEqual([]);
  });

  it("the harness interrupted (SIGINT) while the subject hangs after the save: the scratch folder is empty", { timeout: 120_000 }, async () => {
    const scratch = scratchFolder();
    let sawCheckpoint = false;
    const r = await clipParity([...RESUME, "--subject", S("hangs-after-save.js")], { CLIP_PARITY_SCRATCH: scratch }, async (pid) => {
      sawCheckpoint = await until(() => filesBelow(scratch).some((f) => f.endsWith(".json")), 60_000);
      process.kill(pid, "SIGINT");
    });
    expect(sawCheckpoint, "the checkpoint was written before the interrupt").toBe(true);
    expect(r.signal ?? r.code).not.toBe(0);
    expect(readdirSync(scratch)).toEqual([]);
  });
});

describe("bad environment and paths: one line, exit 2, before anything runs", () => {
  it.each([
    ["CLIP_PARITY_SCRATCH naming a file", [...RESUME, "--subject", "bucketed"], () => ({ CLIP_PARITY_SCRATCH: aFile() }), /^clip-parity: CLIP_PARITY_SCRATCH: \S+ is not a folder/],
    ["CLIP_PARITY_FUZZ_SEED=abc", ["fuzz", "--subject", "bucketed", "--runs", "2", "--out", mkdtempSync(join(tmpdir(), "cp-fz-"))], () => ({ CLIP_PARITY_FUZZ_SEED: "abc" }), /^clip-parity: CLIP_PARITY_FUZZ_SEED: "abc" is not an integer/],
    ["--golden update with the golden folder a file", ["run", "--matrix", "cpu", "--golden", "update", "--quiet"], () => ({ CLIP_PARITY_GOLDEN_DIR: aFile() }), /^clip-parity: --golden update: \S+ is not a folder/],
  ])("%s", { timeout: 60_000 }, async (_what, args, vars, message) => {
    const started = performance.now();
    const r = await clipParity(args, vars());
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr.trim()).toMatch(message);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(performance.now() - started).toBeLessThan(30_000);
  });
});

describe("plan, train and resume take --timeout-s: a clip that never returns ends the job in seconds, not the default limit", () => {
  it.each([
    ["plan", ["plan", "--model", "llama3-debug", "--layout", "tp2", "--subject", S("busy-loop.js"), "--timeout-s", "2"], /isolation/],
    ["train", ["train", "--layouts", "tp2", "dp_shard2", "--model", "llama3-debug", "--subject", S("busy-loop.js"), "--steps", "1", "--timeout-s", "2"], /fail isolation/],
    ["resume", [...RESUME, "--subject", S("busy-loop.js"), "--timeout-s", "2"], /fail isolation/],
  ])("%s", { timeout: 90_000 }, async (_command, args, said) => {
    const started = performance.now();
    const r = await clipParity(args, {});
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout + r.stderr).toMatch(said);
    // the default phase limit is 60 s (an hour for plan): 2 s plus the grace, worker start and load stay far under it
    expect(performance.now() - started).toBeLessThan(40_000);
  });
});

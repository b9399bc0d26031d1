/**
 * `torch:<module>:<function>` subjects (issue 7): real Python clipping functions run by adapters/torch under
 * torchrun (gloo on CPU) and judged by the same checks as built-in subjects. The parts that need no torch
 * (spec parsing, the message when torch is missing) always run; the rest needs `npm run setup:torch`.
 */
import { execa } from "execa";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadSubject } from "../../harness/registry/registry.ts";
import { closeTorchSessions, loadTorchSubject, parseTorchSpec, PROJECT_ROOT, type TorchSubject } from "../../harness/external/torch/subject.ts";
import type { Subject } from "../../harness/subject/api.ts";
import { InputError } from "../../harness/errors.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { type Cell } from "../../harness/cell/cell.ts";
import { type CellResult } from "../../harness/results/types.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();
process.env.PYTHONPATH = [join(PROJECT_ROOT, "suites", "torch", "fixtures"), process.env.PYTHONPATH].filter(Boolean).join(":");

const STOCK = "torch:torch.nn.utils:clip_grad_norm_";

function cell(subject: string, layout: string, model: string, dtype: Cell["dtype"], normType: number, regime: Cell["regime"]): Cell {
  return { subject, layout: parseLayout(layout), model, dtype, normType, regime, seed: 0 };
}

async function run(c: Cell, subject?: Subject): Promise<CellResult> {
  return runCell(c, { subject: subject ?? (await loadSubject(c.subject)) });
}

const status = (r: CellResult, id: string) => r.checks.find((c) => c.id === id)!.status;
const failed = (r: CellResult) => r.checks.filter((c) => c.status === "fail").map((c) => c.id);
const message = (r: CellResult, id: string) => r.checks.find((c) => c.id === id)!.message;

afterAll(async () => {
  await closeTorchSessions();
});

describe("torch:<module>:<function> subjects without torch", () => {
  it("refuses a malformed spec with the expected form", () => {
    for (const bad of ["torch:", "torch:torch.nn.utils", "torch:torch.nn.utils:", "torch::f", "torch:a b:c", "torch:1x:f"]) {
      expect(() => parseTorchSpec(bad), bad).toThrow(InputError);
      expect(() => parseTorchSpec(bad), bad).toThrow(/torch:<module>:<function>/);
    }
    expect(parseTorchSpec(STOCK)).toEqual({ kind: "function", spec: STOCK, module: "torch.nn.utils", fn: "clip_grad_norm_", target: "torch.nn.utils:clip_grad_norm_", pins: [] });
    expect(parseTorchSpec("torch:torchtitan")).toEqual({ kind: "framework", spec: "torch:torchtitan", framework: "torchtitan", pins: [] });
  });

  it("tells the user to run npm run setup:torch when torch is missing (exit 2)", async () => {
    const saved = process.env.CLIP_PARITY_TORCH_PYTHON;
    process.env.CLIP_PARITY_TORCH_PYTHON = "/nonexistent/clip-parity/python";
    try {
      await expect(loadSubject(STOCK)).rejects.toThrow(/npm run setup:torch/);
      const cli = await execa(process.execPath, [join(PROJECT_ROOT, "bin", "clip-parity.js"), "cell", "--subject", STOCK, "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active"], { reject: false, env: { CLIP_PARITY_TORCH_PYTHON: "/nonexistent/clip-parity/python" } });
      expect(cli.exitCode).toBe(2);
      expect(cli.stderr).toMatch(/PyTorch.*not installed.*npm run setup:torch/);
    } finally {
      if (saved === undefined) delete process.env.CLIP_PARITY_TORCH_PYTHON;
      else process.env.CLIP_PARITY_TORCH_PYTHON = saved;
    }
  }, 60_000);
});

describe(`PyTorch functions as subjects, through the adapter${torch.skipNote}`, () => {
  it.runIf(torch.run)("refuses a target that does not exist before anything runs", async () => {
    await expect(loadSubject("torch:torch.nn.utils:no_such_clip")).rejects.toThrow(/cannot be imported.*no_such_clip/);
    await expect(loadSubject("torch:no_such_module_xyz:clip")).rejects.toThrow(InputError);
  }, 120_000);

  it.runIf(torch.run)("stock clip_grad_norm_ on FSDP2xTP2: every check passes, collectives and scratch recorded", async () => {
    const r = await run(cell(STOCK, "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toEqual([]);
    expect(status(r, "parity.tensors")).toBe("pass");
    expect(r.ranks.every((x) => typeof x.norm === "number" && x.norm > 1000)).toBe(true);
    for (const c of r.comm) {
      expect(c.calls).toBeGreaterThan(0);
      expect(c.byKind.all_reduce.calls).toBe(c.calls);
      expect(Object.keys(c.byGroup).every((k) => /^\d+(,\d+)*$/.test(k))).toBe(true);
    }
    expect(r.memory.every((m) => m.scratchPeakBytes > 0 && m.leakedBytes === 0)).toBe(true);
  }, 600_000);

  it.runIf(torch.run)("stock clip_grad_norm_ with PP: no reduction over the pipeline (parity.norm, parity.ranks)", async () => {
    const r = await run(cell(STOCK, "pp2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toEqual(expect.arrayContaining(["parity.norm", "parity.ranks"]));
    expect(r.ranks[0]!.norm).toBeLessThan(r.referenceNorm);
    expect(status(r, "liveness")).toBe("pass");
  }, 300_000);

  it.runIf(torch.run)("stock clip_grad_norm_ with experts on their own mesh: raises on every rank", async () => {
    const r = await run(cell(STOCK, "pp2,dp_shard2,ep2", "deepseek-v3-debug", "f32", 2, "active"));
    expect(failed(r)).toContain("errors.raised");
    expect(message(r, "errors.raised")).toMatch(/RuntimeError: .*same mesh/);
    expect(r.ranks.every((x) => x.error !== undefined)).toBe(true);
  }, 300_000);

  it.runIf(torch.run)("a user's own correct Python clip passes every value check, replicas and experts included", async () => {
    const r = await run(cell("torch:clip_targets:correct", "pp2,dp_shard2,ep2", "deepseek-v3-debug", "f32", 2, "ones"));
    // One norm per mesh costs one collective per mesh: the dense and expert meshes span the same ranks here.
    expect(failed(r)).toEqual(["comm.budget"]);
    expect(message(r, "comm.budget")).toMatch(/3 collectives \(3 all_reduce\b.*budget 2/);
    expect(status(r, "scaling.replicas")).toBe("pass");
    expect(status(r, "parity.norm")).toBe("pass");
    expect(status(r, "parity.ranks")).toBe("pass");
  }, 300_000);

  it.runIf(torch.run)("collectives hidden from the dispatch monitor (_disable_current_modes) are counted from the process groups", async () => {
    // every gradient gathered whole out of the Monitor's sight: the norm is right, the collectives still count
    const r = await run(cell("torch:clip_targets:hidden", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(message(r, "comm.budget")).toMatch(/^rank \d issued \d+ collectives/);
    for (const c of r.comm) expect(c.calls).toBeGreaterThan(20);
  }, 300_000);

  it.runIf(torch.run)("scratch allocated out of the dispatch monitor's sight (_disable_current_modes) is counted at torch's allocator", async () => {
    // a flat copy of every local gradient, then torch's own clip: only the copy is over budget
    const r = await run(cell("torch:clip_targets:hidden_scratch", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toContain("memory.peak");
    expect(status(r, "parity.norm")).toBe("pass");
    for (const m of r.memory) expect(m.scratchPeakBytes).toBeGreaterThanOrEqual(m.gradBytes);
  }, 300_000);

  it.runIf(torch.run)("collectives hidden on a process group the target made itself are counted (issue 55)", async () => {
    // the adapter counted c10d's sequence numbers on its meshes' groups only: this target's 13 all_gathers went unseen
    const r = await run(cell("torch:clip_targets:own_group_hidden", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toContain("comm.budget");
    for (const c of r.comm) expect(c.calls).toBeGreaterThan(10);
  }, 300_000);

  it.runIf(torch.run)("a target cannot silence what measures it: the adapter's modules are sealed and it writes with functions bound before any target loads (issue 55)", async () => {
    const r = await run(cell("torch:clip_targets:wraps_writes", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toContain("comm.budget");
    for (const c of r.comm) expect(c.calls).toBeGreaterThan(10);
  }, 300_000);

  it.runIf(torch.run)("memory no allocator sees (numpy copies of the gradients) is counted by the operating system (issue 55)", async () => {
    const r = await run(cell("torch:clip_targets:numpy_scratch", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toEqual(["memory.peak"]);
    expect(status(r, "parity.tensors")).toBe("pass");
    for (const m of r.memory) expect(m.scratchPeakBytes).toBeGreaterThan(m.budgetBytes);
  }, 300_000);

  it.runIf(torch.run)("a rank finds no other rank's input in the session folder, or fails comm.reach where root reads it anyway (issue 55)", async () => {
    // inactive: nothing is scaled, so a rank reading another's file reads its input, whenever it reads it
    const r = await run(cell("torch:clip_targets:peeks", "dp_shard2,tp2", "llama3-debug", "f32", 2, "inactive"));
    if (process.getuid?.() === 0) {
      // root lists a folder of mode 0300 all the same: the right norm, from no collective
      expect(status(r, "parity.norm")).toBe("pass");
      expect(failed(r)).toContain("comm.reach");
    } else {
      expect(failed(r)).toContain("errors.raised");
      expect(message(r, "errors.raised")).toMatch(/peeks found 0 input files in the session folder \(PermissionError/);
    }
  }, 300_000);

  it.runIf(torch.run)("comm.reach is judged for torch cells: a norm right without any collective fails it (issue 55)", async () => {
    // the session folder made listable again by the target itself: the norm is right, only comm.reach tells
    const r = await run(cell("torch:clip_targets:peeks_unlocked", "dp_shard2,tp2", "llama3-debug", "f32", 2, "inactive"));
    expect(status(r, "parity.norm")).toBe("pass");
    expect(failed(r)).toContain("comm.reach");
    expect(message(r, "comm.reach")).toMatch(/^rank \d returned a norm .* joined it only to ranks \[\d\]/);
  }, 300_000);

  it.runIf(torch.run)("two torch subjects in one run cannot affect each other: one's import-time patch of torch never reaches the other's cells (issue 55)", async () => {
    const patcher = await run(cell("torch:patches_import:clip", "dp_shard2", "llama3-debug", "f32", 2, "active"));
    expect(failed(patcher)).toContain("parity.norm");
    const stock = await run(cell(STOCK, "dp_shard2", "llama3-debug", "f32", 2, "active"));
    expect(failed(stock)).toEqual([]);
  }, 300_000);

  it.runIf(torch.run)("a target that stops the profiler counting its memory fails instead of reading 0 bytes", async () => {
    const r = await run(cell("torch:clip_targets:stops_profiler", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(r.ranks.every((x) => /the target stopped torch's profiler during the call/.test(x.error ?? ""))).toBe(true);
    expect(r.checks.filter((c) => c.status === "fail").length).toBeGreaterThan(0);
  }, 300_000);

  it.runIf(torch.run)("gradients the target replaced instead of scaling are judged as returned: the same dtype passes, another dtype is refused", async () => {
    // the adapter clips in the mapped input file: a replaced gradient must be copied into it, one of another dtype must not be
    const replaced = await run(cell("torch:clip_targets:replaces", "dp_shard2,tp2", "llama3-debug", "bf16", 2, "active"));
    // its copies are scratch the clip leaves held by the parameters (memory.*); the values are right
    expect(failed(replaced)).toEqual(["memory.peak", "memory.leak"]);
    expect(status(replaced, "parity.tensors")).toBe("pass");
    const widened = await run(cell("torch:clip_targets:widens", "dp_shard2,tp2", "llama3-debug", "bf16", 2, "active"));
    expect(widened.liveness).toMatch(/^rank 0: the clipped gradients could not be read back: .*the adapter returned f32 \[.*\], expected bf16/);
  }, 300_000);

  it.runIf(torch.run)("a cell the framework cannot be asked is skipped with the reason, never judged from the stub's errors", async () => {
    // transformers' Trainer clips by the 2-norm and takes no error_if_nonfinite: the stub raises on every
    // rank, which errors.nonfinite counted as a pass on a non-finite cell that asks for an error
    for (const c of [cell("torch:transformers", "dp_shard2", "llama3-debug", "f32", 1, "active"), { ...cell("torch:transformers", "dp_shard2", "llama3-debug", "f32", 2, "nonfinite-nan"), errorIfNonfinite: true }]) {
      const r = await run(c);
      expect(r.checks.map((k) => k.status)).toEqual(r.checks.map(() => "skip"));
      expect(r.checks.every((k) => /^not applicable: its clip takes no /.test(k.message))).toBe(true);
    }
    // a Partial(sum) gradient cannot be handed to torch: the cell is skipped with the reason, and a run goes on
    const partial = await run(cell("torch:torch", "tp2", "llama3-debug-sp", "f32", 2, "active"));
    expect(partial.checks.map((k) => k.status)).toEqual(partial.checks.map(() => "skip"));
    expect(partial.checks[0]!.message).toMatch(/^not applicable: .* is placed Partial\(sum\) on tp: torch subjects do not support Partial placements/);
  }, 300_000);

  it.runIf(torch.run)("a signed max for the inf-norm: only -Inf in a gradient shows it (the nonfinite-neginf regime)", async () => {
    const spec = "torch:clip_targets:signed_max";
    const at = (regime: Cell["regime"], errorIfNonfinite: boolean) => ({ ...cell(spec, "dp_shard2", "llama3-debug", "f32", Infinity, regime), errorIfNonfinite });
    const neginf = await run(at("nonfinite-neginf", true));
    expect(failed(neginf)).toContain("errors.nonfinite");
    const posinf = await run(at("nonfinite-inf", true));
    expect(failed(posinf)).toEqual([]);
  }, 300_000);

  it.runIf(torch.run)("a Python exception fails the cell with its message", async () => {
    const r = await run(cell("torch:clip_targets:raises", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toContain("errors.raised");
    expect(status(r, "parity.norm")).toBe("skip"); // a raise is reported once, by what it is
    expect(message(r, "errors.raised")).toMatch(/ValueError: boom from the target \(at clip_targets\.py:\d+ raises\)/); // the adapter's frame left out
    // read as its maintainers would, on the one severity scale the page uses (the torch: subject's ReadsVerdict)
    expect(r.verdict).toEqual({ severity: "raise or hang", causes: [{ text: expect.stringMatching(/^raises ValueError: boom from the target/), source: null, upstream: "not known upstream", severity: "raise or hang" }] });
  }, 300_000);

  it.runIf(torch.run)("a hang is a liveness failure seen by the ranks within the collective timeout, and the next cell runs in a fresh session", async () => {
    const hang = "torch:clip_targets:hang";
    const subject = loadTorchSubject(hang, { cellTimeoutS: 120, collectiveTimeoutS: 5 }) as TorchSubject;
    const r = await run(cell(hang, "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"), subject);
    expect(failed(r)).toContain("liveness");
    expect(r.liveness).toMatch(/^rank [123] timed out in a collective \(a hang\): /);
    expect(subject.lastRun?.jobSeconds).toBeLessThan(30); // not the cell's 120 s
    // a rank stuck outside any collective is caught by the harness's own deadline
    const stall = "torch:clip_targets:stall";
    const stuck = await run(cell(stall, "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"), loadTorchSubject(stall, { cellTimeoutS: 15 }));
    expect(stuck.liveness).toMatch(/did not finish within 15 s.*rank\(s\) 0 never returned/s);
    const next = await run(cell(STOCK, "dp_shard2,tp2", "llama3-debug", "f32", 2, "inactive"));
    expect(failed(next)).toEqual([]);
  }, 600_000);

  it.runIf(torch.run)("a convention's setup runs when the session starts: a target's one-time build (DeepSpeed's CPU comm op) counts in the start, not in the first cell's deadline", async () => {
    await closeTorchSessions();
    const extensions = mkdtempSync(join(tmpdir(), "clip-parity-extensions-")); // nothing built yet, as on a fresh machine
    try {
      const spec = "torch:deepspeed-bf16";
      const subject = loadTorchSubject(spec, { cellTimeoutS: 15, env: { TORCH_EXTENSIONS_DIR: extensions } }) as TorchSubject;
      const r = await run(cell(spec, "single", "llama3-debug", "f32", 2, "active"), subject);
      expect(failed(r)).toEqual([]);
      expect(readdirSync(extensions).length).toBeGreaterThan(0); // the op was built, by this session
      expect(subject.lastRun!.sessionStartSeconds).toBeGreaterThan(0);
      expect(subject.lastRun!.jobSeconds).toBeLessThan(15);
    } finally {
      await closeTorchSessions();
      rmSync(extensions, { recursive: true, force: true });
    }
  }, 300_000);

  it.runIf(torch.run)("a cell that leaves a group out of step ends its session; the next cell runs in a fresh one", async () => {
    const spec = "torch:clip_targets:orphan";
    const subject = loadTorchSubject(spec) as TorchSubject;
    const r = await run(cell(spec, "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"), subject);
    expect(message(r, "errors.raised")).toMatch(/rank 0 gave up/);
    expect(subject.lastRun?.sessionEnded).toMatch(/^group \[0,1,2,3\]: its ranks issued 1, 0, 0, 0 collectives$/);
    const stock = loadTorchSubject(STOCK) as TorchSubject;
    const next = await run(cell(STOCK, "dp_shard2,tp2", "llama3-debug", "f32", 2, "inactive"), stock);
    expect(failed(next)).toEqual([]);
    expect(stock.lastRun?.sessionStartSeconds).toBeGreaterThan(0);
  }, 600_000);

  it.runIf(torch.run)("a crash fails the cell with the adapter's last lines, and the run goes on", async () => {
    const r = await run(cell("torch:clip_targets:crash", "dp_shard2,tp2", "llama3-debug", "f32", 2, "active"));
    expect(failed(r)).toContain("liveness");
    expect(r.liveness).toMatch(/crashed \((exit code|signal)/);
    expect(r.liveness).toMatch(/last output:\n/);
    const next = await run(cell(STOCK, "dp_shard2,tp2", "llama3-debug", "f32", Infinity, "active"));
    expect(failed(next)).toEqual([]);
  }, 600_000);
});

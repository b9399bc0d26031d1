/**
 * Cross-backend parity (issue 6): cells of the gpu1 and gpu4 matrices run on the cpu backend and on
 * the cuda backend, compared by suites/cuda/parity.ts (bitwise norms and clipped gradients for the
 * `exact` tolerance class, the class's tolerance for the others).
 *
 * - On a machine with a GPU: every correct subject on every cell of gpu1 and gpu4
 *   (CLIP_PARITY_PARITY=quick runs the short list below instead; =full runs every cell anywhere).
 * - Without one: the same comparison with the cuda backend's kernels run by the CPU emulation
 *   (scripts/cuda-emu.mjs builds it with the host C++ compiler; slow, so the short list only). That
 *   is the cuda code path end to end (binding, device store, launches, kernels), not a GPU.
 *   Without a C++ compiler it is skipped with a message, except under CI.
 * Also: without CUDA, `npm test -- --matrix gpu4` exits non-zero and says how to use the cpu backend.
 */
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { native } from "../../harness/backend/native.ts";
import { isCI } from "../../harness/util/env.ts";
import { CORRECT_SUBJECTS } from "../../harness/registry/registry.ts";
import { cellsOf, resolveMatrix } from "../../matrix/index.ts";
import { formatLayout, parseLayout } from "../../harness/layout/layout.ts";
import type { Cell } from "../../harness/cell/cell.ts";
import { buildCudaEmu } from "../../scripts/cuda-emu.mjs";
import { formatRow, parityOf } from "./parity.ts";

const ci = isCI();
const status = native().cudaStatus();
let mode: "gpu" | "emulation" | "skip" = "skip";
let why = "";
if (status.present && !status.emulated) mode = "gpu";
else if (status.emulated) mode = "emulation";
else {
  try {
    process.env.CLIP_PARITY_CUDA_EMU = buildCudaEmu();
    mode = "emulation";
  } catch (err) {
    why = `no GPU (${status.message}) and the CPU emulation could not be built: ${(err as Error).message.split("\n")[0]}`;
    if (ci) throw new Error(`cuda parity must run under CI (on the emulation): ${why}`);
  }
}

/** The short list: both models, the exact and tolerant subjects, one rank and four (shared devices, cross-device gathers). */
const QUICK: [string, string, string, number, string, string[]][] = [
  ["gpu1", "single", "llama3-debug", 2, "active", CORRECT_SUBJECTS as string[]],
  ["gpu1", "single", "deepseek-v3-debug", 2, "ones", ["exact", "reference"]],
  ["gpu4", "pp2,tp2", "llama3-debug", 2, "active", ["exact", "reference", "bucketed"]],
  ["gpu4", "dp_shard2,tp2", "llama3-debug", 2, "nonfinite-inf", ["exact", "reference", "titan"]],
  ["gpu4", "pp2,tp2", "llama3-debug", 1, "nonfinite-nan", ["exact", "reference"]],
  ["gpu4", "pp2,dp_shard2,ep2", "deepseek-v3-debug", 2, "active", ["exact", "reference"]],
];

function quickCells(): Cell[] {
  const out: Cell[] = [];
  for (const [m, spec, model, norm, regime, subjects] of QUICK) {
    const layout = formatLayout(parseLayout(spec));
    const c = resolveMatrix(m).cases.find(
      (x) => formatLayout(x.layout) === layout && x.model === model && x.normType === norm && x.regime === regime,
    );
    if (!c) throw new Error(`matrix ${m} has no case ${spec} ${model} n${norm} ${regime} (update QUICK)`);
    for (const s of subjects) out.push({ subject: s, ...c });
  }
  return out;
}

// CLIP_PARITY_PARITY=full|quick; by default full on a GPU, quick on the emulation
const full = (process.env.CLIP_PARITY_PARITY ?? (mode === "gpu" ? "full" : "quick")) === "full";
const cells: Cell[] = full
  ? [...cellsOf(resolveMatrix("gpu1"), CORRECT_SUBJECTS), ...cellsOf(resolveMatrix("gpu4"), CORRECT_SUBJECTS)]
  : quickCells();

describe.skipIf(mode === "skip")(`cuda parity with the cpu backend (${mode}: ${status.message.slice(0, 120)})`, () => {
  it("has cells to compare", () => {
    expect(cells.length).toBeGreaterThan(mode === "gpu" ? 10 : 5);
  });
  for (const cell of cells) {
    it(`${cell.subject} ${formatLayout(cell.layout)} ${cell.model} ${cell.dtype} n${cell.normType} ${cell.regime}`, { timeout: 600_000 }, async () => {
      const row = await parityOf(cell);
      console.log(formatRow(row));
      expect(row.problems).toEqual([]);
      if (row.tolerance === "exact") expect(row.normsBitwise && row.hashesEqual).toBe(true);
    });
  }
});

if (mode === "skip") {
  describe("cuda parity", () => {
    it.skip(`skipped: ${why}`, () => {});
  });
}

describe.runIf(!status.present)("without CUDA", () => {
  it("npm test -- --matrix gpu4 exits non-zero and says how to run the cells on the cpu backend", () => {
    const env = { ...process.env };
    delete env.CLIP_PARITY_BACKEND;
    delete env.CLIP_PARITY_CUDA_EMU;
    const r = spawnSync(process.execPath, ["scripts/test.mjs", "--matrix", "gpu4"], { encoding: "utf8", env });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("matrix gpu4 needs CUDA, which is not available here (CUDA driver library (libcuda.so) not found");
    expect(r.stderr).toContain("npm test -- --matrix gpu4 --backend cpu");
  });
});

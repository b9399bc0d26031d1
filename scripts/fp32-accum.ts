/**
 * `npm run fp32-accum [-- --from RESULTS.json]`
 *
 * Checks the fp32-accum class's bound (harness/checks/types.ts fp32AccumBound) against stock torch: runs
 * `torch:torch` (torch.nn.utils.clip_grad_norm_ as an FSDP2/DTensor loop calls it) on every float32 cell of
 * the cpu matrix, keeps the cells where torch computes the whole norm (one PP stage: torch has no pipeline
 * awareness; finite norms; no rank raised) and writes docs/fp32-accum.json: each kept cell's relative
 * error, its bound and their ratio, worst first. `--from` reads a `run --json` file of such a run instead.
 * suites/strength/fp32-accum.test.ts requires the largest ratio to be at most 1/4 (a margin of 4x), and
 * suites/torch/fp32-accum.test.ts that a fresh run of the worst cells gives the same norms.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import type { DType } from "../harness/subject/api.ts";
import { fp32AccumBound } from "../harness/checks/types.ts";
import { computeReference } from "../harness/gradients/reference.ts";
import { getModel } from "../harness/model/models.ts";
import { readResultFile, type CellJson } from "../harness/results/schema.ts";
import { writeFileAtomic } from "../harness/util/fs.ts";

export const FP32_ACCUM_DATA = fileURLToPath(new URL("../docs/fp32-accum.json", import.meta.url));
const ROOT = fileURLToPath(new URL("../", import.meta.url));

/** The run that measures stock torch: every float32 cell of the cpu matrix. */
export const TORCH_RUN = ["run", "--matrix", "cpu", "--subject", "torch:torch", "--filter", "/f32/", "--golden", "off", "--quiet"];

export interface AccumCell {
  id: string;
  elements: number;
  normType: number | "inf";
  norm: number;
  reference: number;
  relErr: number;
  bound: number;
  ratio: number;
}

export interface AccumData {
  generatedBy: string;
  /** Float32 cells of the run, and those kept (where torch computes the whole norm). */
  cellsRun: number;
  cellsKept: number;
  maxRatio: number;
  cells: AccumCell[];
}

const finite = (x: unknown): x is number => typeof x === "number" && Number.isFinite(x);

/** A kept cell's error and bound, or null when torch does not compute the whole norm there. */
export function accumCell(c: CellJson): AccumCell | null {
  if (c.layout.pp !== 1 || !finite(c.totalNorm) || !finite(c.referenceNorm) || c.referenceNorm === 0) return null;
  if (!c.ranks?.length || c.ranks.some((r) => r.error !== undefined || r.norm !== c.totalNorm)) return null;
  const normType = c.normType === "inf" ? Infinity : c.normType;
  const elements = computeReference(getModel(c.model), c.dtype as DType, normType, c.regime, c.seed, 0).elementsWithGrad;
  const relErr = Math.abs(c.totalNorm - c.referenceNorm) / c.referenceNorm;
  const bound = fp32AccumBound(normType, elements);
  return { id: c.id, elements, normType: c.normType, norm: c.totalNorm, reference: c.referenceNorm, relErr, bound, ratio: relErr / bound };
}

export function accumData(cells: readonly CellJson[]): AccumData {
  const f32 = cells.filter((c) => c.dtype === "f32");
  const kept = f32.flatMap((c) => accumCell(c) ?? []).sort((a, b) => b.ratio - a.ratio || a.id.localeCompare(b.id));
  return {
    generatedBy: "npm run fp32-accum (scripts/fp32-accum.ts): clip-parity " + TORCH_RUN.join(" "),
    cellsRun: f32.length,
    cellsKept: kept.length,
    maxRatio: kept[0]?.ratio ?? 0,
    cells: kept,
  };
}

function main(): number {
  const { values } = parseArgs({ args: process.argv.slice(2), options: { from: { type: "string" } }, strict: true });
  let from = values.from;
  let dir: string | undefined;
  if (!from) {
    dir = mkdtempSync(join(tmpdir(), "clip-parity-fp32-accum-"));
    from = join(dir, "torch.json");
    // exit 1 is expected: torch fails cells for other causes (no PP reduction, two meshes)
    const r = spawnSync(process.execPath, ["bin/clip-parity.js", ...TORCH_RUN, "--json", from], { cwd: ROOT, stdio: "inherit" });
    if (r.status !== 0 && r.status !== 1) {
      process.stderr.write(`fp32-accum: the torch run exited with ${r.status ?? r.signal}\n`);
      return 2;
    }
  }
  try {
    const data = accumData(readResultFile(from).cells);
    writeFileAtomic(FP32_ACCUM_DATA, JSON.stringify(data, null, 1) + "\n");
    const worst = data.cells[0];
    process.stdout.write(
      `fp32-accum: ${data.cellsKept} of ${data.cellsRun} float32 cells kept; largest error ${data.maxRatio.toFixed(3)} of the bound` +
        (worst ? ` (${worst.id}: ${worst.relErr.toExponential(3)} against ${worst.bound.toExponential(3)})` : "") +
        `; wrote ${FP32_ACCUM_DATA}\n`,
    );
    return 0;
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) process.exitCode = main();

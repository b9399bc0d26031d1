/**
 * The cross-backend parity test outside vitest (scripts/gpu-check.sh runs it; it needs only tsx):
 * the same cells and comparisons as suites/cuda/parity.test.ts, one line per cell.
 *
 *   node --import tsx suites/cuda/parity-run.ts [--matrix gpu1,gpu4] [--json FILE]
 * Exit status: 0 every cell matched, 1 a cell differed, 2 CUDA is absent.
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { native } from "../../harness/backend/native.ts";
import { CORRECT_SUBJECTS } from "../../harness/registry/registry.ts";
import { cellsOf, resolveMatrix } from "../../matrix/index.ts";
import { formatRow, parityOf, type ParityRow } from "./parity.ts";

const { values: args } = parseArgs({ options: { matrix: { type: "string", default: "gpu1,gpu4" }, json: { type: "string" } } });
const status = native().cudaStatus();
if (!status.present) {
  console.error(`parity: CUDA is not available here (${status.message})`);
  process.exit(2);
}
console.log(`parity: cuda ${status.emulated ? "EMULATED on the CPU" : "on the GPU"}: ${status.message}`);
const cells = args.matrix.split(",").flatMap((m) => cellsOf(resolveMatrix(m), CORRECT_SUBJECTS));
const rows: ParityRow[] = [];
const t0 = performance.now();
for (const cell of cells) {
  const row = await parityOf(cell);
  rows.push(row);
  console.log(formatRow(row));
}
const bad = rows.filter((r) => r.problems.length);
const exact = rows.filter((r) => r.tolerance === "exact");
console.log(
  `parity: ${rows.length} cells (${args.matrix}) in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${rows.length - bad.length} matched, ${bad.length} differed; ` +
    `${exact.filter((r) => r.normsBitwise && r.hashesEqual).length}/${exact.length} exact-class cells bitwise equal (norms and every clipped gradient), ` +
    `${rows.filter((r) => r.tolerance !== "exact" && r.normsBitwise).length}/${rows.length - exact.length} other cells with bitwise equal norms`,
);
if (args.json) writeFileSync(args.json, JSON.stringify({ status, rows }, null, 2));
process.exit(bad.length ? 1 : 0);

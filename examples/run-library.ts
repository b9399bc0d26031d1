/**
 * The library road: what `clip-parity run` does, from your own script or test runner. One matrix
 * (here two cases written inline; builtinMatrices().cpu is the cpu matrix), the options the command
 * line's flags map to, and hooks for your own reporting. Run: npx tsx examples/run-library.ts
 */
import { parseLayout, runMatrix, type Matrix } from "clip-parity";

const matrix: Matrix = {
  name: "mine",
  description: "PP2/DP2/EP2 and PP4 on the MoE debug model",
  backend: "cpu",
  cases: ["pp2,dp_shard2,ep2", "pp4"].map((spec) => ({
    layout: parseLayout(spec),
    model: "deepseek-v3-debug",
    dtype: "f32" as const,
    normType: 2,
    regime: "active" as const,
    seed: 0,
  })),
};

const out = await runMatrix(matrix, { subjects: ["bucketed", "./examples/my-clip.ts"], workers: 2 }, {
  onCellEnd(result) {
    const failed = result.checks.filter((c) => c.status === "fail");
    console.log(`${failed.length ? "FAIL" : "ok  "} ${result.id}${failed.map((c) => `\n     ${c.id}: ${c.message}`).join("")}`);
  },
});
console.log(`${out.summary.passed} passed, ${out.summary.failed} failed`);
process.exitCode = out.summary.failed > 0 ? 1 : 0;

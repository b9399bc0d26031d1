/**
 * The runner's in-process mode (`workers: 0`, used by the mutation suite): the same results as the
 * worker pool, cell for cell (norms, every check's verdict, the tensor hash), in matrix order.
 */
import { describe, expect, it } from "vitest";
import { runMatrix } from "../../harness/run/runner.ts";
import type { CellResult } from "../../harness/results/types.ts";
import { builtinMatrices } from "../../matrix/index.ts";

const view = (r: CellResult) => ({ id: r.id, norm: r.totalNorm, ref: r.referenceNorm, hash: r.tensorHash, checks: r.checks.map((c) => `${c.id}:${c.status}`) });

describe("runMatrix with workers: 0", () => {
  it("gives the worker pool's results, in matrix order", async () => {
    const cpu = builtinMatrices().cpu;
    // a few cheap cells of different shapes: a tie across stages, a non-finite error, a clip corner
    const cases = [cpu.cases[0]!, ...cpu.cases.filter((c) => c.layout.pp === 2 && c.model === "deepseek-v3-debug" && c.layout.tp === 2).slice(0, 1), ...cpu.cases.filter((c) => c.regime === "nonfinite-nan").slice(0, 1), cpu.cases.at(-1)!];
    const matrix = { ...cpu, cases };
    const options = { subjects: ["bucketed", "exact"], golden: "off", hashTensors: true } as const;
    const pooled = await runMatrix(matrix, { ...options, workers: 2 });
    const inline = await runMatrix(matrix, { ...options, workers: 0 });
    expect(inline.results.length).toBe(cases.length * 2);
    expect(inline.results.map(view)).toEqual(pooled.results.map(view));
    expect(inline.summary).toEqual(pooled.summary);
  });
});

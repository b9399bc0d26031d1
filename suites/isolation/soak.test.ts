/**
 * Soak (issue 12): 2,000 cells in one process through the library runner, its worker threads included.
 * The resident set may grow with the results the run keeps, never with what a cell allocated: a leak
 * of one cell's tensors would be megabytes per cell. The growth per cell is printed.
 */
import { describe, expect, it } from "vitest";
import { runMatrix } from "../../harness/run/runner.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import type { Case } from "../../harness/cell/cell.ts";

const CELLS = 2000;

describe("soak", () => {
  it(`${CELLS} cells in one process: the ledger back to zero each time, bounded RSS growth`, { timeout: 600_000 }, async () => {
    const layouts = ["single", "tp2", "dp_shard2", "pp2"].map(parseLayout);
    const cases: Case[] = Array.from({ length: CELLS / 2 }, (_, i) => ({
      layout: layouts[i % layouts.length]!,
      model: "llama3-debug",
      dtype: "bf16" as const,
      normType: 2,
      regime: i % 3 === 0 ? "zeros" : "empty",
      seed: i,
    }));
    // warm up: workers, modules and the allocator's first arenas are not per-cell growth
    await runMatrix({ name: "soak-warmup", description: "", backend: "cpu", cases: cases.slice(0, 20), subjects: ["bucketed", "exact"] }, { golden: "off" });
    const before = process.memoryUsage().rss;
    const out = await runMatrix({ name: "soak", description: "", backend: "cpu", cases, subjects: ["bucketed", "exact"] }, { golden: "off" });
    const after = process.memoryUsage().rss;
    expect(out.summary).toEqual({ cells: CELLS, passed: CELLS, failed: 0, skipped: 0 });
    for (const r of out.results) expect(r.checks.find((c) => c.id === "memory.leak")?.status).not.toBe("fail");
    const perCell = (after - before) / CELLS;
    console.log(`soak: ${CELLS} cells, RSS ${(before / 2 ** 20).toFixed(0)} -> ${(after / 2 ** 20).toFixed(0)} MiB, ${(perCell / 1024).toFixed(1)} KiB per cell`);
    expect(perCell).toBeLessThan(256 * 1024);
  });
});

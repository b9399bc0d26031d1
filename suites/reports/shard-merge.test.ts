/**
 * Sharding (`run --shard i/n`) partitions the cells exactly by a stable hash of the cell id, and
 * `merge` puts shards back together: the merged file equals the unsharded run, duplicates that agree
 * are kept once, duplicates that differ are refused.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { builtinMatrices, cellsOf } from "../../matrix/index.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { cellId } from "../../harness/cell/cell.ts";
import { fnv1a64, parseShard, selectShard, shardOfId } from "../../harness/run/shard.ts";
import { mergeResults } from "../../harness/results/merge.ts";
import { cli, synthCell, synthFile, tempDir, tinyMatrixFile } from "./fixtures.ts";

describe("--shard i/n", () => {
  it("parses i/n (1-based) and refuses anything else, naming the flag and the value", () => {
    expect(parseShard("1/2")).toEqual({ index: 1, count: 2 });
    expect(parseShard("4/4")).toEqual({ index: 4, count: 4 });
    expect(() => parseShard("3/2")).toThrow('--shard: "3/2" has a shard index above the shard count 2; expected i/n with 1 <= i <= n, e.g. 1/4');
    expect(() => parseShard("0/2")).toThrow(/shard index below 1/);
    expect(() => parseShard("1/0")).toThrow(/shard count below 1/);
    expect(() => parseShard("1of2")).toThrow(/is not of the form i\/n/);
    expect(() => parseShard("-1/2")).toThrow(/is not of the form i\/n/);
  });

  it("uses SPEC §5's fnv1a64 of the cell id: stable across runs and machines", () => {
    expect(fnv1a64("")).toBe(0xcbf29ce484222325n);
    expect(fnv1a64("a")).toBe(0xaf63dc4c8601ec8cn);
    expect(shardOfId("reference/single/llama3-debug/f32/n2/active/s0", 4)).toBe(Number(fnv1a64("reference/single/llama3-debug/f32/n2/active/s0") % 4n) + 1);
  });

  it("partitions every built-in matrix exactly, each shard non-empty, whatever n", () => {
    const subjects = Object.keys(BUILTIN_SUBJECTS);
    for (const m of ["gpu4", "gpu8", "cpu"]) {
      const cells = cellsOf(builtinMatrices()[m], subjects);
      for (const n of [1, 2, 3, 4, 7]) {
        const shards = Array.from({ length: n }, (_, i) => selectShard(cells, `${i + 1}/${n}`));
        const ids = shards.flat().map(cellId);
        expect(ids.length, `${m} ${n} shards`).toBe(cells.length);
        expect(ids.sort()).toEqual(cells.map(cellId).sort());
        for (const s of shards) expect(s.length, `${m} shard of ${n}`).toBeGreaterThan(cells.length / n / 2);
      }
    }
  });

  it("partitions any set of ids exactly, independent of order (property)", () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.string({ unit: "grapheme", maxLength: 30 }), { maxLength: 60 }), fc.integer({ min: 1, max: 9 }), (ids, n) => {
        const owner = ids.map((id) => shardOfId(id, n));
        for (const s of owner) expect(s >= 1 && s <= n).toBe(true);
        expect([...ids].reverse().map((id) => shardOfId(id, n))).toEqual([...owner].reverse());
      }),
    );
  });

  it("run --shard + merge = the unsharded run; a bad --shard is exit 2", async () => {
    const dir = tempDir();
    const matrix = tinyMatrixFile(dir);
    const env = { CI: undefined, CLIP_PARITY_GOLDEN_DIR: join(dir, "golden") };
    const bad = await cli(["run", "--matrix", matrix, "--shard", "3/2", "--quiet"], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--shard: "3/2" has a shard index above the shard count 2');

    const full = join(dir, "full.json");
    expect([0, 1]).toContain((await cli(["run", "--matrix", matrix, "--json", full, "--quiet"], env)).code);
    const parts: string[] = [];
    for (const i of [1, 2, 3]) {
      const p = join(dir, `shard-${i}.json`);
      await cli(["run", "--matrix", matrix, "--shard", `${i}/3`, "--json", p, "--quiet"], env);
      parts.push(p);
    }
    const merged = join(dir, "merged.json");
    const m = await cli(["merge", "--out", merged, ...parts]);
    expect(m.code).toBe(0);
    expect(m.stdout).toContain(`merged 3 files into ${merged}: 6 cells: 3 passed, 3 failed, 0 skipped`);
    const strip = (f: { cells: { id: string; durationMs?: number; timings?: unknown }[]; summary: unknown }) => ({
      cells: f.cells.map(({ durationMs: _, timings: _t, ...c }) => c).sort((a, b) => a.id.localeCompare(b.id)),
      summary: f.summary,
    });
    const a = JSON.parse(readFileSync(full, "utf8"));
    const b = JSON.parse(readFileSync(merged, "utf8"));
    expect(strip(b)).toEqual(strip(a));
    const counts = parts.map((p) => JSON.parse(readFileSync(p, "utf8")).cells.length);
    expect(counts.reduce((x, y) => x + y, 0)).toBe(6);
  });
});

describe("merge", () => {
  const X = synthCell("reference/dp_shard2/x");
  const Y = synthCell("reference/tp2/y");
  const Z = synthCell("hf-replicate/tp2/z", { checks: [{ id: "memory.peak", status: "fail", message: "over" }] });

  it("recomputes the summary and keeps identical duplicates once (timing aside)", () => {
    const { file, duplicates } = mergeResults([
      { path: "a.json", data: synthFile([X, Y]) },
      { path: "b.json", data: { cells: [{ ...Y, durationMs: 999 }, Z], summary: { cells: 0, passed: 0, failed: 0, skipped: 0 } } },
    ]);
    expect(file.cells.map((c) => c.id)).toEqual([X.id, Y.id, Z.id]);
    expect(file.summary).toEqual({ cells: 3, passed: 2, failed: 1, skipped: 0 });
    expect(duplicates).toBe(1);
  });

  it("keeps the shards' catchBy (their union), so a report of the merged file still shows a known-bad subject's failures as expected", async () => {
    const { file } = mergeResults([
      { path: "a.json", data: { ...synthFile([X]), catchBy: { "hf-replicate": ["memory.peak"] } } },
      { path: "b.json", data: { ...synthFile([Z]), catchBy: { "hf-replicate": ["scaling.nonempty", "memory.peak"] } } },
    ]);
    expect(file.catchBy).toEqual({ "hf-replicate": ["memory.peak", "scaling.nonempty"] });
    expect(mergeResults([{ path: "a.json", data: synthFile([X]) }]).file).not.toHaveProperty("catchBy");
    const dir = tempDir();
    const merged = join(dir, "m.json");
    writeFileSync(merged, JSON.stringify(file));
    const r = await cli(["report", "--results", merged, "--report", "md", "--out", dir]);
    expect(r.code, r.stderr).toBe(0);
    const md = readFileSync(join(dir, "summary.md"), "utf8");
    expect(md).toContain("### Known-bad subjects, failing as expected: 1 (cell, check) pairs in 1 groups");
    expect(md).not.toContain("### Unexpected failures");
  });

  it("refuses a duplicate with different content, naming the cell, both files and the difference (exit 2)", async () => {
    const dir = tempDir();
    const a = join(dir, "a.json");
    const b = join(dir, "b.json");
    writeFileSync(a, JSON.stringify(synthFile([X, Y])));
    writeFileSync(b, JSON.stringify(synthFile([{ ...Y, totalNorm: 3.25 }])));
    const r = await cli(["merge", "--out", join(dir, "m.json"), a, b]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`merge: cell ${Y.id} is in ${a} and in ${b} with different content (totalNorm: 3.5 vs 3.25)`);
    const none = await cli(["merge", "--out", join(dir, "m.json")]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("merge: no result files given");
    const noOut = await cli(["merge", a]);
    expect(noOut.code).toBe(2);
    expect(noOut.stderr).toContain("merge: missing --out (required)");
    writeFileSync(b, JSON.stringify({ cells: [{ id: "x" }], summary: {} }));
    const bad = await cli(["merge", "--out", join(dir, "m.json"), a, b]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain(`${b} is not a clip-parity result file`);
  });
});

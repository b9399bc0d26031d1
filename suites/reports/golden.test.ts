/**
 * Goldens: `--golden update` writes golden/<matrix>.json with its header, `--golden check` (the default
 * wherever the file exists for the backend, CI or not) passes on the same values and fails, listing the cells, on any
 * drift; `--golden update` is refused when CI=true. The committed golden/gpu1.json still matches.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { GOLDEN_GENERATOR, goldenFileSchema, goldenSession, readGolden } from "../../harness/run/golden.ts";
import { isCI } from "../../harness/util/env.ts";
import { cli, tempDir, tinyMatrixFile } from "./fixtures.ts";
import { builtinMatrices, cellsOf } from "../../matrix/index.ts";
import { subjectsOf } from "../../harness/run/policy.ts";
import { cellId } from "../../harness/cell/cell.ts";

function setup() {
  const dir = tempDir("clip-parity-golden-");
  const matrix = tinyMatrixFile(dir);
  const goldenDir = join(dir, "golden");
  const path = join(goldenDir, "tiny.json");
  const run = (args: string[], ci: boolean) =>
    cli(["run", "--matrix", matrix, "--quiet", ...args], { CI: ci ? "true" : undefined, CLIP_PARITY_GOLDEN_DIR: goldenDir });
  return { dir, matrix, goldenDir, path, run };
}

describe("goldens", () => {
  it("update writes norms and tensor hashes under a header; check passes on the same run", async () => {
    const g = setup();
    const u = await g.run(["--golden", "update", "--subject", "reference"], false);
    expect(u.code).toBe(0);
    expect(u.stdout).toContain(`golden: wrote 3 cells to ${g.path}`);
    const file = goldenFileSchema.parse(JSON.parse(readFileSync(g.path, "utf8")));
    expect(file.header).toMatchObject({ matrix: "tiny", generator: GOLDEN_GENERATOR, backend: "cpu", platform: process.platform, arch: process.arch, node: process.version, cells: 3 });
    expect(file.header.clipParity).toMatch(/^\d+\.\d+\.\d+/);
    const ids = Object.keys(file.cells);
    expect(ids).toEqual([...ids].sort());
    for (const e of Object.values(file.cells)) {
      expect(e.hash).toMatch(/^[0-9a-f]{16}$/);
      expect(e.totalNorm).toBe(e.referenceNorm);
      expect(Math.fround(e.totalNorm as number)).toBe(e.totalNorm); // a float32 norm, stored exactly
    }
    expect(new Set(Object.values(file.cells).map((e) => e.hash)).size).toBe(3);

    const c = await g.run(["--golden", "check", "--subject", "reference", "--json", join(g.dir, "r.json")], false);
    expect(c.code).toBe(0);
    expect(c.stdout).toContain(`golden: 3 cells match ${g.path}`);
    const json = JSON.parse(readFileSync(join(g.dir, "r.json"), "utf8"));
    for (const cell of json.cells) expect(cell.checks.at(-1)).toEqual({ id: "golden", status: "pass", message: "" });
  });

  it("check fails on any drift (norm or tensors) and lists the drifted cells; exit 1", async () => {
    const g = setup();
    expect((await g.run(["--golden", "update"], false)).code).toBe(1); // hf-replicate fails its checks, the golden is written all the same
    const file = readGolden(g.path);
    expect(Object.keys(file.cells)).toHaveLength(6);
    const ids = Object.keys(file.cells).filter((id) => id.startsWith("reference/"));
    const [normId, hashId] = ids;
    file.cells[normId].totalNorm = (file.cells[normId].totalNorm as number) * (1 + 2 ** -20);
    file.cells[hashId].hash = "0123456789abcdef";
    writeFileSync(g.path, JSON.stringify(file));

    const r = await g.run(["--golden", "check", "--subject", "reference"], false);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`golden: 2 of 3 cells drifted from ${g.path}`);
    expect(r.stdout).toMatch(new RegExp(`DRIFT ${normId.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}: totalNorm \\S+ \\(golden\\) -> \\S+ \\(now\\)`));
    expect(r.stdout).toContain(`DRIFT ${hashId}: tensor hash 0123456789abcdef (golden) -> `);
    // the terminal groups failures by subject and check (one block, the first message, one reproduce line)
    expect(r.stdout).toContain("FAIL reference x golden: 2 cells\n");
    expect(r.stdout).toContain(`     drift from ${g.path} (cpu, ${process.platform}/${process.arch}`);
    expect(r.stdout).toContain("3 cells\ncells: 1 passed, 2 failed, 0 skipped");
  });

  it("is checked by default wherever the file exists (same backend), CI or not, as npm test checks it; off otherwise", async () => {
    const g = setup();
    const none = await g.run(["--subject", "reference"], true);
    expect(none.code).toBe(0);
    expect(none.stdout).not.toContain("golden:");
    await g.run(["--golden", "update", "--subject", "reference"], false);
    const file = readGolden(g.path);
    const id = Object.keys(file.cells)[0];
    file.cells[id].referenceNorm = 1.5;
    writeFileSync(g.path, JSON.stringify(file));
    const ci = await g.run(["--subject", "reference"], true);
    expect(ci.code).toBe(1);
    expect(ci.stdout).toContain(`DRIFT ${id}: referenceNorm 1.5 (golden) -> `);
    const local = await g.run(["--subject", "reference"], false);
    expect(local.code).toBe(1); // not CI: the same verdict on a drift (it used to pass here and fail in CI)
    expect(local.stdout).toContain(`DRIFT ${id}: referenceNorm 1.5 (golden) -> `);
    const off = await g.run(["--subject", "reference", "--golden", "off"], true);
    expect(off.code).toBe(0);
    file.header.backend = "cuda";
    writeFileSync(g.path, JSON.stringify(file));
    const other = await g.run(["--subject", "reference"], true);
    expect(other.code).toBe(0); // a golden of another backend is not the default check
  });

  it("update is refused when CI=true (exit 2, clear message) and leaves the file alone", async () => {
    const g = setup();
    const r = await g.run(["--golden", "update", "--subject", "reference"], true);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--golden update is refused when CI=true: goldens change only on a person's request");
    expect(existsSync(g.path)).toBe(false);
    expect(() => goldenSession({ mode: "update", matrix: "tiny", backend: "cpu", partial: false, dir: g.goldenDir, env: { CI: "1" } })).toThrow(/refused when CI=true/);
    expect(goldenSession({ mode: "update", matrix: "tiny", backend: "cpu", partial: false, dir: g.goldenDir, env: { CI: "false" } })?.mode).toBe("update");
    expect(isCI({ CI: "true" })).toBe(true);
    expect(isCI({})).toBe(false);
  });

  it("refuses a bad mode, a check without a file and a corrupt golden (exit 2)", async () => {
    const g = setup();
    const mode = await g.run(["--golden", "maybe"], false);
    expect(mode.code).toBe(2);
    expect(mode.stderr).toContain('--golden: "maybe" is not one of check, update, off');
    const missing = await g.run(["--golden", "check"], false);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`--golden check: ${g.path} does not exist; create it with --golden update`);
    await g.run(["--golden", "update", "--subject", "reference", "--filter", "/single/"], false);
    writeFileSync(g.path, JSON.stringify({ header: { matrix: "tiny" }, cells: {} }));
    const corrupt = await g.run(["--golden", "check"], false);
    expect(corrupt.code).toBe(2);
    expect(corrupt.stderr).toContain(`golden ${g.path} is not a valid golden file`);
  });

  it("a partial update keeps the other entries; a full one replaces them", async () => {
    const g = setup();
    await g.run(["--golden", "update", "--subject", "reference"], false);
    const p = await g.run(["--golden", "update", "--subject", "hf-replicate", "--filter", "/single/"], false);
    expect(p.stdout).toContain(`golden: wrote 1 cells to ${g.path} (3 kept from before: the run was partial)`);
    const file = readGolden(g.path);
    expect(Object.keys(file.cells)).toHaveLength(4);
    file.cells["stale/single/llama3-debug/f32/n2/active/s0"] = { totalNorm: 1, referenceNorm: 1, hash: null };
    writeFileSync(g.path, JSON.stringify(file));
    await g.run(["--golden", "update"], false);
    const full = readGolden(g.path);
    expect(Object.keys(full.cells)).toHaveLength(6);
    expect(full.cells).not.toHaveProperty(["stale/single/llama3-debug/f32/n2/active/s0"]);
    expect(full.header.cells).toBe(6);
  });

  it("the committed golden/gpu1.json is valid and still matches (reference and exact on llama3-debug)", async () => {
    const path = new URL("../../golden/gpu1.json", import.meta.url).pathname;
    const file = readGolden(path);
    expect(file.header).toMatchObject({ matrix: "gpu1", generator: GOLDEN_GENERATOR, backend: "cpu" });
    const r = await cli(["run", "--matrix", "gpu1", "--backend", "cpu", "--subject", "reference", "--subject", "exact", "--filter", "llama3-debug", "--golden", "check", "--quiet"], {
      CI: undefined,
      CLIP_PARITY_GOLDEN_DIR: new URL("../../golden/", import.meta.url).pathname,
    });
    expect(r.stdout).toMatch(/golden: \d+ cells match .*gpu1\.json/);
    expect(r.stdout).not.toContain("no entry");
    expect(r.code).toBe(0);
  });

  /**
   * golden/cpu.json: the main job (`clip-parity run --matrix cpu` under CI=true) checks it by default.
   * After an intended change to the cpu matrix or the subjects, regenerate it outside CI with
   * `node bin/clip-parity.js run --matrix cpu --golden update --quiet` and review the diff.
   */
  const CPU_GOLDEN = new URL("../../golden/cpu.json", import.meta.url).pathname;
  const REGENERATE = "node bin/clip-parity.js run --matrix cpu --golden update --quiet";

  it("the committed golden/cpu.json holds exactly the cpu matrix's cells", () => {
    const file = readGolden(CPU_GOLDEN);
    expect(file.header).toMatchObject({ matrix: "cpu", generator: GOLDEN_GENERATOR, backend: "cpu" });
    const cpu = builtinMatrices().cpu!;
    const ids = cellsOf(cpu, subjectsOf(cpu, undefined)).map(cellId).sort();
    const have = Object.keys(file.cells).sort();
    const missing = ids.filter((id) => !(id in file.cells));
    const extra = have.filter((id) => !ids.includes(id));
    expect({ missing: missing.slice(0, 5), extra: extra.slice(0, 5) }, `golden/cpu.json is out of date with the cpu matrix: ${REGENERATE}`).toEqual({ missing: [], extra: [] });
    expect(file.header.cells).toBe(ids.length);
  });

  it("the main job checks golden/cpu.json by default, under CI and elsewhere", () => {
    const session = goldenSession({ mode: undefined, matrix: "cpu", backend: "cpu", partial: false, dir: join(CPU_GOLDEN, ".."), env: { CI: "true" } });
    expect(session?.mode).toBe("check");
    expect(goldenSession({ mode: undefined, matrix: "cpu", backend: "cpu", partial: false, dir: join(CPU_GOLDEN, ".."), env: {} })?.mode).toBe("check");
    expect(goldenSession({ mode: undefined, matrix: "cpu", backend: "cuda", partial: false, dir: join(CPU_GOLDEN, ".."), env: {} })).toBeNull();
  });

  it("golden/cpu.json still matches (a slice of the cpu matrix: a clip corner layout, every correct subject)", async () => {
    const r = await cli(["run", "--matrix", "cpu", "--filter", "/pp2,tp2/llama3-debug/", "--golden", "check", "--quiet"], {
      CI: undefined,
      CLIP_PARITY_GOLDEN_DIR: join(CPU_GOLDEN, ".."),
    });
    expect(r.stdout).toMatch(/golden: \d+ cells match .*cpu\.json/);
    expect(r.stdout).not.toMatch(/no entry|drift/);
    expect(r.code).toBe(0);
  });
});

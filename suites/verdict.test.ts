/**
 * One road (issues 11 and 56): `npm test -- --matrix FILE` and `clip-parity run --matrix FILE` give the same
 * verdict on the same file, a user subject in it included (npm test once ran only the built-in ones, so a
 * failing user subject passed there), a golden drift (npm test once checked the golden and run did not say)
 * and a failing section (run judged the sections and npm test skipped them): both take the verdict from
 * harness/run/verdict.ts.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..");

function matrixFile(subjects: string[], name = "mine", layout = "pp2,tp2"): string {
  const dir = mkdtempSync(join(tmpdir(), "cp-verdict-"));
  const path = join(dir, `${name}.json`);
  const cases = [{ layout, model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" }];
  writeFileSync(path, JSON.stringify({ name, subjects, cases }));
  return path;
}

function cleanEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith("CLIP_PARITY_") || k.startsWith("VITEST")) delete env[k];
  return { ...env, ...extra };
}

function both(path: string, extra: NodeJS.ProcessEnv = {}): { run: number; test: number; out: string } {
  const opts = { cwd: ROOT, encoding: "utf8" as const, env: cleanEnv(extra), timeout: 300_000 };
  const run = spawnSync(process.execPath, ["bin/clip-parity.js", "run", "--matrix", path, "--quiet"], opts);
  const test = spawnSync(process.execPath, ["scripts/test.mjs", "--matrix", path, "suites/matrix.test.ts"], opts);
  return { run: run.status ?? -1, test: test.status ?? -1, out: `${run.stdout}${run.stderr}\n---\n${test.stdout}${test.stderr}` };
}

describe("npm test -- --matrix FILE and clip-parity run --matrix FILE agree", () => {
  it("a file whose user subject forgets the pp reduction fails both", { timeout: 600_000 }, () => {
    const r = both(matrixFile(["bucketed", "./examples/forgets-pp.js"]));
    expect(r.run, r.out).toBe(1);
    expect(r.test, r.out).toBe(1);
    expect(r.out).toContain("./examples/forgets-pp.js/pp2,tp2/llama3-debug/f32/n2/active/s0");
  });

  it("a file of correct subjects (a user's .ts among them) passes both", { timeout: 600_000 }, () => {
    const r = both(matrixFile(["bucketed", "./examples/my-clip.ts"]));
    expect(r.run, r.out).toBe(0);
    expect(r.test, r.out).toBe(0);
  });

  it("a golden drift fails both, and both say which cell drifted", { timeout: 600_000 }, () => {
    const path = matrixFile(["bucketed"]);
    const goldenDir = mkdtempSync(join(tmpdir(), "cp-verdict-golden-"));
    const written = spawnSync(process.execPath, ["bin/clip-parity.js", "run", "--matrix", path, "--golden", "update", "--quiet"], { cwd: ROOT, encoding: "utf8", env: cleanEnv({ CLIP_PARITY_GOLDEN_DIR: goldenDir, CI: "" }), timeout: 300_000 });
    expect(written.status, `${written.stdout}${written.stderr}`).toBe(0);
    const file = join(goldenDir, "mine.json");
    const golden = JSON.parse(readFileSync(file, "utf8")) as { cells: Record<string, { hash: string | null }> };
    const id = "bucketed/pp2,tp2/llama3-debug/f32/n2/active/s0";
    expect(Object.keys(golden.cells)).toEqual([id]);
    golden.cells[id]!.hash = "0000000000000000"; // the tensors of the same cell, as another build scaled them
    writeFileSync(file, JSON.stringify(golden, null, 2));
    const r = both(path, { CLIP_PARITY_GOLDEN_DIR: goldenDir });
    expect(r.run, r.out).toBe(1);
    expect(r.test, r.out).toBe(1);
    const [run, test] = r.out.split("\n---\n");
    for (const out of [run!, test!]) expect(out, r.out).toMatch(/golden/);
    expect(run).toContain(id);
    expect(test).toContain(id);
  });

  it("a failing section fails both though every cell passes: a file named cpu meets cpu's regression cells", { timeout: 600_000 }, () => {
    // skip-empty-bucket passes every debug-model cell (none has an empty-shard group); a regression cell has one
    const path = matrixFile(["./suites/strength/subjects/skip-empty-bucket.ts"], "cpu", "tp2");
    const r = both(path, { CLIP_PARITY_GOLDEN_DIR: mkdtempSync(join(tmpdir(), "cp-verdict-nogolden-")) });
    expect(r.run, r.out).toBe(1);
    expect(r.test, r.out).toBe(1);
    const [run, test] = r.out.split("\n---\n");
    expect(run).toMatch(/cells: 1 passed, 0 failed/);
    expect(run).toMatch(/regression section \(cpu\)/);
    expect(run).toMatch(/^verdict: FAIL: .*regression section/m);
    expect(test).toMatch(/every regression, train and resume case is as expected/);
  });
});

/**
 * One road (issue 11): `npm test -- --matrix FILE` and `clip-parity run --matrix FILE` give the same
 * verdict on the same file, a user subject in it included (npm test once ran only the built-in ones,
 * so a failing user subject passed there).
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..");

function matrixFile(subjects: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), "cp-verdict-"));
  const path = join(dir, "mine.json");
  const cases = [{ layout: "pp2,tp2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" }];
  writeFileSync(path, JSON.stringify({ name: "mine", subjects, cases }));
  return path;
}

function both(path: string): { run: number; test: number; out: string } {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith("CLIP_PARITY_") || k.startsWith("VITEST")) delete env[k];
  const opts = { cwd: ROOT, encoding: "utf8" as const, env, timeout: 300_000 };
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
});

/**
 * The replay paths of a counterexample: `clip-parity cell --file FILE` and `npm run fuzz -- --replay
 * FILE`, plus a short `npm run fuzz` search. Run as the user would (child processes, in parallel).
 */
import { afterAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseLayout } from "../../harness/layout/layout.ts";
import { Shard } from "../../harness/model/plan.ts";
import { caseToFile, type FuzzCase } from "../../harness/fuzz/case.ts";

const dir = mkdtempSync(join(tmpdir(), "clip-parity-fuzz-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** padding-counted's shrunk counterexample: tp2, one [3] param sharded on tp (chunks of 2 and 1). */
const counterexample: FuzzCase = {
  subject: "padding-counted",
  layout: parseLayout("tp2"),
  dtype: "f32",
  normType: 2,
  regime: "active",
  seed: 0,
  params: [{ name: "p0", shape: [3], stage: 0, mesh: "dense", axes: ["tp"], placements: [Shard(0)], replicas: [] }],
};
const file = join(dir, "padding-counted.json");
writeFileSync(file, caseToFile(counterexample));

function run(script: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [script, ...args], { cwd: process.cwd(), timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

describe("replaying a counterexample from the command line", () => {
  it("cell --file, fuzz --replay and a short fuzz run", { timeout: 120_000 }, async () => {
    const [cell, cellOther, replay, badFlag, search] = await Promise.all([
      run("bin/clip-parity.js", ["cell", "--file", file]),
      run("bin/clip-parity.js", ["cell", "--file", file, "--subject", "bucketed"]),
      run("bin/clip-parity.js", ["fuzz", "--replay", file]),
      run("bin/clip-parity.js", ["cell", "--file", file, "--layout", "tp4"]),
      run("bin/clip-parity.js", ["fuzz", "--runs", "20", "--subject", "bucketed", "--seed", "7"]),
    ]);
    expect(cell.code, cell.stderr).toBe(1);
    expect(cell.stdout).toMatch(/fail parity\.norm: rank \d: total norm/);
    expect(cell.stdout).toContain(`reproduce: npx clip-parity cell --file ${file}`);
    expect(cellOther.code, cellOther.stdout + cellOther.stderr).toBe(0);
    expect(cellOther.stdout).toMatch(/^bucketed\/tp2\/fuzz-[0-9a-f]{12}\/f32\/n2\/active\/s0/);
    expect(replay.code).toBe(1);
    expect(replay.stdout).toContain("fail parity.norm");
    expect(badFlag.code).toBe(2);
    expect(badFlag.stderr).toContain("only --subject may be given with it (got --layout)");
    expect(search.code, search.stdout + search.stderr).toBe(0);
    expect(search.stdout).toContain("pass bucketed: 20 cases");
  });
});

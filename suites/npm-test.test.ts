/**
 * `npm test` itself (scripts/test.mjs -> cli/test.ts): `--matrix NAME` runs that matrix's suite alone and
 * says so; the matrix suite compares with golden/<matrix>.json whether CI is set or not (issue 42); `--help`
 * is ours; a mistyped flag is a one-line exit 2 with a suggestion, never vitest's CACError stack (issue 45).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { suiteGoldenMode, vitestArgs, MATRIX_SUITE } from "../cli/test.ts";
import { tempDir } from "./reports/fixtures.ts";

// CI unset: what a developer's machine sees
const npmTest = (args: string[], env: Record<string, string> = {}) =>
  execa("node", ["scripts/test.mjs", ...args], { reject: false, env: { CI: "", CLIP_PARITY_GOLDEN: "", ...env }, all: true });
const plain = (text: string | undefined) => (text ?? "").replace(/\x1b\[[0-9;]*m/g, "");
const cli = (args: string[], env: Record<string, string> = {}) => execa("node", ["bin/clip-parity.js", ...args], { reject: false, env: { CI: "", ...env } });

describe("npm test and the golden", () => {
  it("the matrix suite checks golden/cpu.json without CI; --golden (CLIP_PARITY_GOLDEN) chooses otherwise", () => {
    expect(suiteGoldenMode("cpu", "cpu", {})).toBe("check");
    expect(suiteGoldenMode("cpu", "cpu", { CI: "" })).toBe("check");
    expect(suiteGoldenMode("cpu", "cpu", { CLIP_PARITY_GOLDEN: "off" })).toBe("off");
    // golden/cpu.json was made on cpu: a run on another backend is not compared with it by default
    expect(suiteGoldenMode("cpu", "meta", {})).toBeUndefined();
  });

  it("npm test -- --matrix FILE runs the matrix suite alone, says so, and fails on a golden drift without CI", async () => {
    const dir = tempDir("cp-npm-test-");
    const matrix = join(dir, "tinygold.json");
    writeFileSync(matrix, JSON.stringify({ name: "tinygold", subjects: ["bucketed"], cases: [{ layout: "tp2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" }] }));
    const goldenDir = join(dir, "golden");
    const env = { CLIP_PARITY_GOLDEN_DIR: goldenDir };
    const made = await cli(["run", "--matrix", matrix, "--golden", "update", "--quiet"], env);
    expect(made.exitCode, made.stderr).toBe(0);
    const file = join(goldenDir, "tinygold.json");
    const golden = JSON.parse(readFileSync(file, "utf8"));
    const [id] = Object.keys(golden.cells);
    golden.cells[id!].totalNorm = 1234.5;
    writeFileSync(file, JSON.stringify(golden));
    const r = await npmTest(["--matrix", matrix], env);
    expect(r.exitCode, r.all).toBe(1);
    expect(r.all).toContain(`npm test: --matrix ${matrix}: running ${MATRIX_SUITE} alone on cpu`);
    expect(plain(r.all)).toMatch(/Test Files\s+1 failed \(1\)/);
    expect(r.all).toMatch(/golden: drift from/);
  }, 300_000);
});

describe("npm test's own flags", () => {
  it("--matrix without a file filter gives vitest the matrix suite alone; plain npm test gives it nothing (the whole suite)", () => {
    expect(vitestArgs({ matrix: "gpu4" }, ["--reporter=dot"])).toEqual([MATRIX_SUITE, "--reporter=dot"]);
    expect(vitestArgs({}, [])).toEqual([]);
    expect(vitestArgs({ matrix: "cpu" }, ["suites/cli.test.ts"])).toEqual(["suites/cli.test.ts"]);
  });

  it("--help shows our flags and where the rest goes", async () => {
    const r = await npmTest(["--help"]);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/^usage: npm test -- \[--matrix NAME\|FILE\]/);
    for (const flag of ["--matrix", "--backend", "--golden", "--report", "--out"]) expect(r.stdout).toContain(flag);
    expect(r.stdout).toContain("Every other argument goes to vitest");
  });

  it("a near miss of our flag is one line, exit 2, with a suggestion", async () => {
    const r = await npmTest(["--matrx", "gpu4"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim()).toBe("clip-parity: npm test: unknown flag --matrx; did you mean --matrix? (npm test -- --help lists the flags)");
  });

  it("a flag vitest does not know either is one line, exit 2, not a CACError stack trace", async () => {
    const r = await npmTest(["--no-such-flag-here"]);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).not.toContain("CACError");
    expect(r.stderr.trim().split("\n")).toEqual(["clip-parity: npm test: unknown flag --no-such-flag-here (npm test -- --help lists the flags)"]);
  }, 60_000);
});

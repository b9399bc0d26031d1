/**
 * Subjects that misbehave never take the harness down (issue 12). Each runs beside a correct subject
 * in one `clip-parity run`: the run ends within the wall-clock limit plus a few seconds, exits 1 with
 * a failing check that names the cause, writes its JSON, and the correct subject's cell still passes.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { cli } from "./run-cli.ts";

const ROOT = resolve(import.meta.dirname, "../..");
const TIMEOUT_S = 2;

function matrix(subject: string): string {
  const dir = mkdtempSync(join(tmpdir(), "cp-iso-"));
  const path = join(dir, "m.json");
  writeFileSync(path, JSON.stringify({ name: "iso", subjects: [subject, "bucketed"], cases: [{ layout: "tp2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" }] }));
  return path;
}

interface Cell {
  id: string;
  subject: string;
  /** a user's module: its path (`subject` is its defineSubject name) */
  subjectPath?: string;
  checks: { id: string; status: string; message: string }[];
}

async function runWith(subject: string, extra: string[] = []) {
  const m = matrix(subject);
  const json = join(m, "..", "out.json");
  const r = await cli(["run", "--matrix", m, "--json", json, "--timeout-s", String(TIMEOUT_S), "--quiet", ...extra]);
  const cells = JSON.parse(readFileSync(json, "utf8")).cells as Cell[];
  const bad = cells.find((c) => (c.subjectPath ?? c.subject) === subject)!;
  const good = cells.find((c) => c.subject === "bucketed")!;
  const failures = bad.checks.filter((c) => c.status === "fail").map((c) => `${c.id}: ${c.message}`);
  return { ...r, bad, good, failures: failures.join("\n") };
}

const S = (name: string) => `./suites/isolation/subjects/${name}`;

describe("a misbehaving subject fails its own cell, and the run goes on", () => {
  it.each([
    ["busy-loop.js", /isolation: the subject did not yield for \d+ s \(a loop that never awaits\?\): its worker was terminated/],
    ["microtask-loop.js", /isolation: the subject did not yield for \d+ s/],
    ["exits.js", /isolation: the subject called process\.exit\(0\)/],
    ["timer-throws.js", /isolation: uncaught exception in the subject's thread: Error: thrown from a timer/],
    ["unhandled.js", /isolation: unhandled promise rejection in the subject's thread: Error: nobody awaited this/],
    ["heap-hog.js", /isolation: the subject's thread ran out of memory \(heap limit 64 MiB\)/],
    ["frees-grad.js", /rank \d raised .*free: tensor \d+ is the gradient of [\w.]+, which the harness gave this subject/],
    ["writes-view.js", /rank \d raised .*Cannot assign to read only property '0'/],
    ["huge-alloc.js", /rank \d raised .*needs 4,000,000,000,000 bytes; .* limit of/],
    ["leaves-interval.js", /isolation: the subject left \d+ Timeout running after its clip returned/],
    ["prod-op.js", /all_reduce: op "prod" is not one of "sum", "max"/],
  ])("%s", { timeout: 120_000 }, async (file, message) => {
    const r = await runWith(S(file), ["--worker-heap-mb", "64"]);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.failures).toMatch(message);
    expect(r.good.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace from the harness
    expect(r.stdout).toContain("cells: 1 passed, 1 failed, 0 skipped");
    // the wall-clock limit plus a few seconds (and the start of node, tsx and two workers)
    expect(r.ms).toBeLessThan((TIMEOUT_S + 5 + 10) * 1000);
  });
});

describe("bad input is refused before any work (exit 2, a message naming the value and the rule)", () => {
  const dir = mkdtempSync(join(tmpdir(), "cp-bad-"));
  const file = (name: string, body: unknown) => {
    const p = join(dir, name);
    writeFileSync(p, typeof body === "string" ? body : JSON.stringify(body));
    return p;
  };
  const sweep = file("sweep.json", {
    name: "huge",
    sweep: {
      layouts: Array.from({ length: 40 }, (_, i) => `tp${i + 1}`),
      models: ["llama3-debug", "deepseek-v3-debug"],
      dtypes: ["f32", "bf16", "f16"],
      norms: Array.from({ length: 50 }, (_, i) => i + 1),
      regimes: ["active", "inactive", "boundary", "sparse", "zeros", "ones", "empty"],
      seeds: Array.from({ length: 100 }, (_, i) => i),
    },
  });
  const empty = file("empty.json", { name: "empty", cases: [] });
  const cell = ["cell", "--subject", "bucketed", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active"];
  it.each([
    ["a sweep of 8.4 million cases", ["run", "--matrix", sweep], /its sweep makes 40 x 2 x 3 x 50 x 7 x 100 = 8,400,000 cases, over the limit of 100,000 \(raise it with --max-cells N\)/],
    ["a matrix without cases", ["run", "--matrix", empty], /nothing to run: matrix empty has no cases/],
    ["a filter that matches nothing", ["run", "--matrix", "cpu", "--filter", "no-such-cell"], /nothing to run: no cell id matches \/no-such-cell\//],
    ["a world over the run limit", [...cell, "--layout", "tp8192"], /layout tp8192 has 8,192 ranks, over the limit of 4,096/],
    ["a plan over its limit", ["plan", "--model", "llama3-8b", "--layout", "tp65536"], /layout tp65536 has 65,536 ranks, over the limit of 16,384/],
    ["--json on a directory", ["run", "--matrix", "cpu", "--json", tmpdir()], /--json: .* is a directory; give a file path/],
    ["--json under a file", ["run", "--matrix", "cpu", "--json", join(sweep, "x.json")], /--json: .* cannot be written: .* is a file, not a directory/],
    ["--max-norm Infinity", [...cell, "--layout", "tp2", "--max-norm", "Infinity"], /--max-norm: "Infinity" is not a decimal number/],
    ["--max-norm 1e309", [...cell, "--layout", "tp2", "--max-norm", "1e309"], /--max-norm: 1e309 overflows a float64/],
    ["--max-norm 0x10", [...cell, "--layout", "tp2", "--max-norm", "0x10"], /--max-norm: "0x10" is not a decimal number/],
    ["--seed empty", [...cell, "--layout", "tp2", "--seed", ""], /--seed: "" is not a decimal integer/],
    ["--seed 0x10", [...cell, "--layout", "tp2", "--seed", "0x10"], /--seed: "0x10" is not a decimal integer/],
    ["--seed 1e3", [...cell, "--layout", "tp2", "--seed", "1e3"], /--seed: "1e3" is not a decimal integer/],
    ["a module whose top level never returns", ["run", "--matrix", "cpu", "--subject", S("top-level-loop.js"), "--timeout-s", "2"], /subject module .*top-level-loop\.js did not finish loading within 2 s \(a loop at its top level\?\)/],
  ])("%s", { timeout: 120_000 }, async (_what, args, message) => {
    const r = await cli(args as string[]);
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(message as RegExp);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.ms).toBeLessThan(30_000);
  });
});

describe("subjects load from any folder", () => {
  const outside = mkdtempSync(join(tmpdir(), "cp-subject-"));
  it("the README's import resolves for a .ts outside the repository, without a package.json beside it", { timeout: 120_000 }, async () => {
    writeFileSync(join(outside, "mine.ts"), readFileSync(join(ROOT, "examples/my-clip.ts"), "utf8"));
    const r = await cli(["cell", "--subject", join(outside, "mine.ts"), "--layout", "pp2,tp2", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active"]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });
  it("a syntax error names the file, the line and the column", { timeout: 120_000 }, async () => {
    // different names: tsx resolves x.js to a sibling x.ts, as TypeScript's ESM convention has it
    const ts = join(outside, "broken-ts.ts");
    writeFileSync(ts, 'export default {\n  name: "broken",\n  clip(( {\n};\n');
    const js = join(outside, "broken-js.js");
    writeFileSync(js, 'export default {\n  name: "broken-js",\n  clip(( {\n};\n');
    const [a, b] = await Promise.all(
      [ts, js].map((p) => cli(["cell", "--subject", p, "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active"])),
    );
    expect(a.code).toBe(2);
    expect(a.stderr).toContain(`syntax error at ${ts}:3:`);
    expect(b.code).toBe(2);
    expect(b.stderr).toContain(`syntax error at ${js}:3:`);
  });
});

describe("resume --from-existing refuses a checkpoint of another run", () => {
  it("another --norm or --regime is exit 2, naming both", { timeout: 180_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-ckpt-"));
    const base = ["resume", "--subject", "bucketed", "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f32", "--steps", "2", "--save-at", "1", "--dir", dir];
    const made = await cli(base);
    expect(made.code, made.stdout + made.stderr).toBe(0);
    const [norm, regime, same] = await Promise.all([
      cli([...base, "--from-existing", "--norm", "1"]),
      cli([...base, "--from-existing", "--regime", "sparse"]),
      cli([...base, "--from-existing"]),
    ]);
    expect(norm.code).toBe(2);
    expect(norm.stderr).toMatch(/written by a run with --norm 2; this run has --norm 1/);
    expect(regime.code).toBe(2);
    expect(regime.stderr).toMatch(/written by a run with --regime active; this run has --regime sparse/);
    expect(same.code, same.stdout + same.stderr).toBe(0);
  });
});

/**
 * A verdict that code under test cannot forge (issue 21). Each subject here attacks the verdict the way a
 * hostile or careless subject could: rewriting the checks or the intrinsics they use, posting results
 * on the worker's port, stopping the wall clock, patching the harness for the next subject, meeting the
 * other ranks outside the collectives, answering from max_norm, returning 10 million numbers. Each one
 * beside the correct `bucketed` in one `clip-parity run`: the attacker's cell fails, the correct cell
 * passes, the JSON is written, and no stack trace reaches the terminal. And every command that runs
 * subject code takes the same isolated road: a subject that exits the process fails there too.
 */
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { cli } from "./run-cli.ts";

const S = (name: string) => `./suites/isolation/subjects/${name}`;
const TIMEOUT_S = 2;

interface Cell {
  id: string;
  subject: string;
  /** a user's module: its path (`subject` is its defineSubject name) */
  subjectPath?: string;
  checks: { id: string; status: string; message: string }[];
}

function matrixFile(subjects: string[], cases: object[]): string {
  const dir = mkdtempSync(join(tmpdir(), "cp-verdict-"));
  const path = join(dir, "m.json");
  writeFileSync(path, JSON.stringify({ name: "verdict", subjects, cases }));
  return path;
}

const TP2 = { layout: "tp2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" };

async function runMatrix(subjects: string[], cases: object[], extra: string[] = []) {
  const m = matrixFile(subjects, cases);
  const json = join(m, "..", "out.json");
  const r = await cli(["run", "--matrix", m, "--json", json, "--timeout-s", String(TIMEOUT_S), "--quiet", ...extra]);
  let cells: Cell[] = [];
  try {
    cells = JSON.parse(readFileSync(json, "utf8")).cells as Cell[];
  } catch {
    // no JSON: the assertions below say so
  }
  const failing = (c: Cell | undefined) => (c?.checks ?? []).filter((k) => k.status === "fail").map((k) => `${k.id}: ${k.message}`).join("\n");
  return { ...r, json, cells, failing };
}

describe("a subject cannot forge or disturb the verdict", () => {
  it.each([
    ["forges-judge.js", /rank \d raised .*Cannot assign to read only property 'judge'/],
    ["forges-intrinsic.js", /rank \d raised .*Cannot assign to read only property 'abs'/],
    ["posts-result.js", /parity\.norm: rank \d: total norm 0 != reference/],
    ["stops-clock.js", /isolation: the subject did not yield for \d+ s/],
    ["returns-huge.js", /parity\.norm: rank \d returned an Array of 10,000,000 elements, not a number/],
  ])("%s fails its own cell; bucketed beside it passes", { timeout: 120_000 }, async (file, message) => {
    const r = await runMatrix([S(file), "bucketed"], [TP2]);
    expect(r.cells.length, r.stdout + r.stderr).toBe(2);
    const bad = r.cells.find((c) => (c.subjectPath ?? c.subject) === S(file));
    const good = r.cells.find((c) => c.subject === "bucketed");
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.failing(bad)).toMatch(message);
    expect(r.failing(good)).toBe("");
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).toContain("cells: 1 passed, 1 failed, 0 skipped");
  });

  it("a 10-million-element return value is summarised: the results stay small", { timeout: 120_000 }, async () => {
    const r = await runMatrix([S("returns-huge.js")], [TP2]);
    expect(r.code).toBe(1);
    expect(statSync(r.json).size).toBeLessThan(200_000);
  });

  it("a subject that patches the harness's Backend cannot break the cells that run after it in its worker", { timeout: 120_000 }, async () => {
    // one worker: the patcher's cells run first, then bucketed's in the same thread
    const r = await runMatrix([S("patches-backend.js"), "bucketed"], [TP2, { ...TP2, layout: "dp_shard2" }], ["--jobs", "1"]);
    const good = r.cells.filter((c) => c.subject === "bucketed");
    expect(good.length, r.stdout + r.stderr).toBe(2);
    for (const c of good) expect(r.failing(c), c.id).toBe("");
    const bad = r.cells.filter((c) => (c.subjectPath ?? c.subject) === S("patches-backend.js"));
    for (const c of bad) expect(r.failing(c), c.id).toMatch(/Cannot assign to read only property 'opsFor'/);
  });
});

describe("ranks meet only through collectives", () => {
  // dp_shard2: every parameter Shard(0), so the two ranks' local sums partition the norm exactly
  const FSDP = { ...TP2, layout: "dp_shard2" };
  it.each([
    ["shares-module-state.js", /parity\.norm: rank \d: total norm [\d.]+ != reference/],
    ["shares-global.js", /rank \d raised .*Cannot (add property __partials|define property __partials), object is not extensible/],
  ])("%s: partial sums passed outside the collectives do not pass the cell", { timeout: 120_000 }, async (file, message) => {
    const r = await runMatrix([S(file)], [FSDP]);
    expect(r.cells.length, r.stdout + r.stderr).toBe(1);
    expect(r.code).toBe(1);
    expect(r.failing(r.cells[0])).toMatch(message);
  });
});

describe("no oracle in the inputs", () => {
  it("max_norm of the boundary regime lies below, on and above the norm: answering nextUp(max_norm) fails", { timeout: 300_000 }, async () => {
    const r = await cli(["run", "--matrix", "cpu", "--subject", S("next-up.js"), "--filter", "/boundary/", "--json", join(mkdtempSync(join(tmpdir(), "cp-next-")), "o.json"), "--quiet"]);
    expect(r.code).toBe(1);
    const line = r.stdout.match(/cells: (\d+) passed, (\d+) failed/);
    expect(line, r.stdout).not.toBeNull();
    expect(Number(line![2])).toBeGreaterThan(0);
  });
});

describe("every command runs subject code on the isolated road", () => {
  const exits = S("exits.js");
  const dir = mkdtempSync(join(tmpdir(), "cp-road-"));
  it.each([
    ["train", ["train", "--subject", exits, "--layouts", "pp2", "pp2,dp_shard2", "--model", "llama3-debug", "--steps", "1"]],
    ["resume", ["resume", "--subject", exits, "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f32", "--steps", "2", "--save-at", "1"]],
    ["plan", ["plan", "--subject", exits, "--model", "llama3-debug", "--layout", "tp2"]],
    ["fuzz", ["fuzz", "--subject", exits, "--runs", "2", "--out", dir]],
  ])("%s: a subject that calls process.exit(0) fails with isolation, never exit 0", { timeout: 180_000 }, async (_what, args) => {
    const r = await cli(args);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout + r.stderr).toMatch(/isolation: the subject called process\.exit\(0\)/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it("cell --file and fuzz --replay: the same", { timeout: 180_000 }, async () => {
    // a real case file, written by the fuzzer itself from a failing known-bad subject
    const out = join(dir, "ce");
    await cli(["fuzz", "--self-test", "--subject", "unbucketed", "--out", out, "--quiet"]);
    const files = readdirSync(out).filter((f) => f.endsWith(".json"));
    expect(files.length).toBeGreaterThan(0);
    const path = join(out, files[0]!);
    for (const args of [["cell", "--file", path, "--subject", exits], ["fuzz", "--replay", path, "--subject", exits]]) {
      const r = await cli(args);
      expect(r.code, r.stdout + r.stderr).toBe(1);
      expect(r.stdout + r.stderr).toMatch(/isolation: the subject called process\.exit\(0\)/);
    }
  });
});

describe("train refuses a comparison of one layout", () => {
  it("fewer than two distinct layouts is exit 2, naming them", { timeout: 60_000 }, async () => {
    const r = await cli(["train", "--layouts", "pp2", "pp2", "--model", "llama3-debug", "--steps", "1"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--layouts: pp2: training parity compares two or more distinct layouts; 1 given \(2 listed\)/);
  });
});

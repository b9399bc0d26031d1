/**
 * Issue 55: a subject that ends the whole process (SIGKILL, a native crash) on one cell of `clip-parity
 * run`. The cells run in a child process under a supervisor (harness/sandbox/supervisor.ts): the run keeps
 * what finished, reruns the cells in flight alone, fails the one that kills its process again with an
 * `isolation` failure naming the subject, the cell and the signal, runs the rest, writes every result and
 * exits 1. And no process outlives the harness, however it ends.
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { processesWith, until } from "../processes.ts";
import { cli, ROOT } from "./run-cli.ts";

const S = (name: string) => `./suites/isolation/subjects/${name}`;
const CASE = { model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" };
// the subjects below end their process on the tp2 case only (rank 0 of a world of two)
const CASES = ["tp4", "tp2", "dp_shard4", "pp4"].map((layout) => ({ layout, ...CASE }));

interface Cell {
  id: string;
  subject: string;
  subjectPath?: string;
  checks: { id: string; status: string; message: string }[];
}

/** The cell's layout, from its id (a cell that failed isolation shows a module's path as its subject). */
const layoutOf = (c: Cell) => c.id.split("/").find((part) => CASES.some((x) => x.layout === part));
const subjectOf = (c: Cell) => c.subjectPath ?? c.subject;

function matrixFile(subjects: string[]): { path: string; json: string } {
  const dir = mkdtempSync(join(tmpdir(), "cp-super-"));
  const path = join(dir, "m.json");
  writeFileSync(path, JSON.stringify({ name: "super", subjects, cases: CASES }));
  return { path, json: join(dir, "out.json") };
}

describe("a subject that ends the whole process fails its own cell, and the run goes on (issue 55)", () => {
  it.each([
    ["kills-process.js", "SIGKILL"],
    ["segfaults.js", "SIGSEGV"],
  ])("%s (%s)", { timeout: 180_000 }, async (file, signal) => {
    const subject = S(file);
    const m = matrixFile([subject, "bucketed"]);
    const r = await cli(["run", "--matrix", m.path, "--json", m.json, "--quiet", "--jobs", "2"], 150_000);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    const cells = JSON.parse(readFileSync(m.json, "utf8")).cells as Cell[];
    // every cell of the matrix, in matrix order (subject-major)
    expect(cells.map((c) => `${subjectOf(c)} ${layoutOf(c)}`)).toEqual(
      [subject, "bucketed"].flatMap((s) => CASES.map((c) => `${s} ${c.layout}`)),
    );
    const failing = (c: Cell) => c.checks.filter((x) => x.status === "fail");
    const killer = cells.find((c) => subjectOf(c) === subject && layoutOf(c) === "tp2")!;
    const isolation = killer.checks.find((c) => c.id === "isolation")!;
    expect(isolation.status).toBe("fail");
    expect(isolation.message).toContain(signal);
    expect(isolation.message).toContain(subject);
    expect(isolation.message).toContain(killer.id);
    expect(isolation.message).toMatch(/reproduce: npx clip-parity cell --subject /);
    expect(failing(killer).map((c) => c.id)).toEqual(["isolation"]);
    // the other cells, the killer's own among them, ran to their end and passed
    for (const c of cells.filter((x) => x !== killer)) expect(failing(c), c.id).toEqual([]);
    expect(r.stdout).toContain("cells: 7 passed, 1 failed, 0 skipped");
    expect(r.stdout).toMatch(new RegExp(`subject \\S*${file.replace(".", "\\.")} on cell \\S+ ended the whole process that ran it by ${signal}`));
  });
});



const markers: string[] = [];
afterAll(() => {
  for (const m of markers) for (const pid of processesWith(m, "environ")) process.kill(pid, "SIGKILL");
});

describe("no process outlives the harness", () => {
  it.each(["SIGKILL", "SIGTERM", "SIGINT"] as const)("the harness ended by %s mid-cell leaves no cell process", { timeout: 120_000 }, async (signal) => {
    const id = randomUUID();
    markers.push(id);
    const m = matrixFile([S("marks-then-loops.js")]);
    const mark = join(m.path, "..", "running");
    const env = { ...process.env, SUPERVISOR_TEST_ID: id, SUPERVISOR_TEST_MARK: mark };
    const harness = spawn(process.execPath, ["bin/clip-parity.js", "run", "--matrix", m.path, "--quiet", "--timeout-s", "600"], { cwd: ROOT, env, stdio: "ignore" });
    const ended = new Promise((r) => harness.on("close", r));
    // a cell's clip runs (in a worker of the cells' process, a process apart from the harness's)
    expect(await until(() => existsSync(mark), 60_000), "the subject's clip started").toBe(true);
    expect(processesWith(id, "environ").length).toBe(2);
    harness.kill(signal);
    await ended;
    expect(await until(() => processesWith(id, "environ").length === 0, 10_000), `left running: ${processesWith(id, "environ").join(", ")}`).toBe(true);
  });
});

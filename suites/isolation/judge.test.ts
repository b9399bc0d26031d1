/**
 * A verdict no subject can reach (issue 41): the reference and every check run in the judge's own thread,
 * which reads the cell's store through its own addon instance; what the subject's thread holds is frozen
 * or refused. Each subject here forged a pass on the code before the judge moved out (seen): a poisoned
 * reference cache, an addon prototype that verifies nothing, a TypeScript subject claiming the PyTorch
 * adapter's self-reported hook, a manifest and a regime mutated in the worker, a norm computed from the
 * generator with no collective at all; and a training whose tied copies train apart, with the addon's tensor comparison
 * made to find nothing in the subject's thread (train.parity passed it). Since issue 55 the worker hands a
 * subject nothing it can rewrite (the addon's exports and prototypes are frozen, its reference kernels taken
 * off): the prototype patches are refused when the module loads, and the oracle finds no exactFull.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { cli } from "./run-cli.ts";

const S = (name: string) => `./suites/isolation/subjects/${name}`;
const FSDP = { layout: "dp_shard2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" };

interface Cell {
  subject: string;
  /** a user's module: its path (`subject` is its defineSubject name) */
  subjectPath?: string;
  checks: { id: string; status: string; message: string }[];
}

async function run(subjects: string[], cases: object[], extra: string[] = []) {
  const dir = mkdtempSync(join(tmpdir(), "cp-judge-"));
  const matrix = join(dir, "m.json");
  writeFileSync(matrix, JSON.stringify({ name: "judge", subjects, cases }));
  const json = join(dir, "out.json");
  const r = await cli(["run", "--matrix", matrix, "--json", json, "--timeout-s", "20", "--quiet", ...extra]);
  let cells: Cell[] = [];
  try {
    cells = (JSON.parse(readFileSync(json, "utf8")) as { cells: Cell[] }).cells;
  } catch {
    // no JSON: the assertions say so
  }
  const failing = (subject: string) =>
    cells
      .filter((c) => (c.subjectPath ?? c.subject) === subject)
      .flatMap((c) => c.checks.filter((k) => k.status === "fail").map((k) => `${k.id}: ${k.message}`))
      .join("\n");
  return { ...r, cells, failing };
}

describe("the judge's realm: a subject's thread cannot change the verdict", () => {
  it.each([
    ["mutates-manifest.js", /rank \d raised .*both refused: Cannot assign to read only property 'mode'.*; Cannot assign to read only property 'length'/],
    ["no-collective-oracle.js", /errors\.raised: rank \d raised .*: native\.exactFull is not a function/],
  ])("%s fails its own cell; bucketed after it in the same worker passes", { timeout: 180_000 }, async (file, message) => {
    const r = await run([S(file), "bucketed"], [FSDP], ["--jobs", "1"]);
    expect(r.cells.length, r.stdout + r.stderr).toBe(2);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.failing(S(file))).toMatch(message);
    expect(r.failing("bucketed")).toBe("");
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });

  it.each([
    ["poisons-reference.js", /could not be loaded: clip-parity\/harness\/gradients\/reference\.ts: harness\/gradients\/reference\.ts is the judge's code \(the reference a cell is judged against\); a subject module may not import it/],
    ["external-hook.js", /field "external" is reserved for the registered PyTorch adapter/],
    ["patches-store.js", /could not be loaded: TypeError: Cannot assign to read only property 'verifyScaled' of object/],
  ])("%s is refused before any cell runs: one line, exit 2", { timeout: 120_000 }, async (file, message) => {
    const r = await run([S(file), "bucketed"], [FSDP]);
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

describe("the judge's code, by every import form a subject could write (issue 57)", () => {
  const refused = /harness\/(gradients\/reference|judge\/judge|backend\/native)\.ts is the judge's code \(the reference a cell is judged against\); a subject module may not import it/;
  // create-require and registers-hook imported the reference on db1239f (seen): require() does not pass the
  // ESM hooks, and a hook a subject registers runs before the harness's and hid the rank query from it
  it.each([
    ["dynamic-package.js", refused],
    ["dynamic-relative.js", refused],
    ["dynamic-url-query.js", refused],
    ["dynamic-symlink.js", refused],
    ["create-require.js", refused],
    ["native-module.js", refused],
    ["judge-module.js", refused],
    ["registers-hook.js", /module\.register: loader hooks cannot be installed in a subject's worker/],
  ])("imports/%s, in its clip: refused, its own cell fails; bucketed after it in the same worker passes", { timeout: 180_000 }, async (file, message) => {
    const r = await run([S(`imports/${file}`), "bucketed"], [FSDP], ["--jobs", "1"]);
    expect(r.cells.length, r.stdout + r.stderr).toBe(2);
    expect(r.failing(S(`imports/${file}`))).toMatch(/errors\.raised: /);
    expect(r.failing(S(`imports/${file}`))).toMatch(message);
    expect(r.failing("bucketed")).toBe("");
  });

  it("imports/create-require-at-load.js: refused when the module loads, one line, exit 2", { timeout: 120_000 }, async () => {
    const r = await run([S("imports/create-require-at-load.js"), "bucketed"], [FSDP]);
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(refused);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

describe("train.parity and resume.equal compare states in the judge's realm", () => {
  it("patches-compare.js (init-unsynced, with the addon's compare made to find nothing) is refused when it loads: the addon is frozen", { timeout: 120_000 }, async () => {
    const r = await cli(["train", "--subject", S("patches-compare.js"), "--layouts", "pp2,dp_shard2,ep2", "pp4", "--model", "deepseek-v3-debug", "--steps", "2", "--timeout-s", "20"]);
    expect(r.code, r.stdout + r.stderr).toBe(2);
    expect(r.stderr).toMatch(/could not be loaded: TypeError: Cannot assign to read only property 'compare' of object/);
  });

  it("init-unsynced itself still fails train.parity at step 0, judged in the judge's realm", { timeout: 120_000 }, async () => {
    const r = await cli(["train", "--subject", "init-unsynced", "--layouts", "pp2,dp_shard2,ep2", "pp4", "--model", "deepseek-v3-debug", "--steps", "2", "--timeout-s", "20"]);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toMatch(/fail train\.parity: step 0 \(the initial state, after the sync of tied copies\): in pp2,dp_shard2,ep2, tied copies differ: rank 2 replica mtp\.0\.embed_tokens\.weight param: element 0/);
  });
});

describe("what the worker hands a subject is frozen (issue 55)", () => {
  it("walks-reachable.js finds nothing writable from its rank context, its arguments, its groups or the addon's exports, and no reference kernel", { timeout: 120_000 }, async () => {
    // the subject throws on rank 0 with every writable property and extensible object it reached (it checks
    // first that its walk sees an object of its own as writable): a pass is the walk coming back empty
    const r = await run([S("walks-reachable.js")], [FSDP, { ...FSDP, layout: "pp2,tp2", model: "deepseek-v3-debug" }]);
    expect(r.cells.length, r.stdout + r.stderr).toBe(2);
    expect(r.failing(S("walks-reachable.js")), r.stdout + r.stderr).toBe("");
    expect(r.code, r.stdout + r.stderr).toBe(0);
  });

  it("patches-fast-check.js (hf-replicate, with fast-check's properties made to pass in its thread) fails clip-parity fuzz: the search runs outside its worker", { timeout: 180_000 }, async () => {
    const out = mkdtempSync(join(tmpdir(), "cp-fuzz-patch-"));
    const r = await cli(["fuzz", "--subject", S("patches-fast-check.js"), "--runs", "50", "--out", out, "--quiet"]);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toMatch(/^FAIL fuzz: patches-fast-check fails parity\./m);
    expect(r.stdout).toMatch(/0 of 1 subjects passed/);
  });
});

/**
 * Output files under conditions a user meets (issue 41): a full disk is one line naming the path, exit 2,
 * not an ENOSPC stack trace; a results file whose subject is named like an Object.prototype key
 * (`constructor`) is reported and merged like any other. Both failed on the code before (seen: a stack trace
 * from writeFileAtomic, exit 1; `m.catchBy.join is not a function` from the Markdown reporter).
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { cli } from "./run-cli.ts";

const ONE_CELL = ["run", "--matrix", "cpu", "--filter", "^bucketed/tp2/llama3-debug/f32/n2/active/s0$", "--quiet"];

describe.skipIf(!existsSync("/dev/full"))("a full disk", () => {
  it.each([
    ["run --json", [...ONE_CELL, "--json", "/dev/full"]],
    ["cell --json", ["cell", "--subject", "bucketed", "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active", "--json", "/dev/full"]],
  ])("%s: one line naming the path and the reason, exit 2", { timeout: 120_000 }, async (_what, args) => {
    const r = await cli(args);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trim()).toBe("clip-parity: /dev/full: could not write it (ENOSPC: no space left on the device); it is left as it was");
  });
});

describe("a subject named `constructor` in a results file", () => {
  const dir = mkdtempSync(join(tmpdir(), "cp-ctor-"));
  const results = join(dir, "ctor.json");
  const plain = join(dir, "ctor-plain.json");
  beforeAll(async () => {
    const r = await cli([...ONE_CELL, "--json", join(dir, "one.json")]);
    expect(r.code, r.stderr).toBe(0);
    const data = JSON.parse(readFileSync(join(dir, "one.json"), "utf8"));
    const renamed = JSON.parse(JSON.stringify(data).replaceAll('"bucketed', '"constructor').replaceAll("bucketed/", "constructor/"));
    writeFileSync(plain, JSON.stringify(renamed));
    renamed.catchBy = { constructor: ["parity.norm"] };
    writeFileSync(results, JSON.stringify(renamed));
  }, 120_000);

  it("meant to pass: every reporter writes its file, no catch test is made up", { timeout: 60_000 }, async () => {
    const out = join(dir, "plain");
    const r = await cli(["report", "--results", plain, "--report", "json,junit,md,html", "--out", out]);
    expect(r.code, r.stderr).toBe(0);
    for (const f of ["results.json", "junit.xml", "summary.md", "report.html"]) expect(existsSync(join(out, f)), f).toBe(true);
    expect(readFileSync(join(out, "junit.xml"), "utf8")).not.toContain("caught by");
  });

  it("known-bad: every reporter writes its file, the known-bad subject's catch test included", { timeout: 60_000 }, async () => {
    const out = join(dir, "reports");
    const r = await cli(["report", "--results", results, "--report", "json,junit,md,html", "--out", out]);
    expect(r.code, r.stderr).toBe(0);
    for (const f of ["results.json", "junit.xml", "summary.md", "report.html"]) expect(existsSync(join(out, f)), f).toBe(true);
    expect(readFileSync(join(out, "junit.xml"), "utf8")).toContain('name="caught by parity.norm" classname="constructor"');
    expect(readFileSync(join(out, "summary.md"), "utf8")).toMatch(/constructor is known-bad \(catchBy parity\.norm\) but none of those checks failed/);
  });

  it("merge keeps its catchBy", { timeout: 60_000 }, async () => {
    const merged = join(dir, "merged.json");
    const r = await cli(["merge", "--out", merged, results]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(readFileSync(merged, "utf8")).catchBy).toEqual({ constructor: ["parity.norm"] });
  });
});

/**
 * No vacuous verdicts (issue 21): a check that passed in the baseline and is now skipped or missing is a
 * regression; a results file in which no check ran is never "no regression" nor PASS, in the gate or in
 * any reporter; the same shard given twice to `merge` is refused, naming both files.
 */
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { compareResults } from "../../harness/results/compare.ts";
import { mergeResults } from "../../harness/results/merge.ts";
import { renderHtml } from "../../reports/html.ts";
import { renderJunit } from "../../reports/junit.ts";
import { renderMarkdown } from "../../reports/markdown.ts";
import { parseReporters, writeReports } from "../../reports/index.ts";
import { summarize } from "../../harness/results/summary.ts";
import { summarizeJson, type CellJson, type ResultFile } from "../../harness/results/schema.ts";
import { all, cli, parseXml, synthCell, synthFile, tempDir } from "./fixtures.ts";

const A = "bucketed/dp_shard2/llama3-debug/f32/n2/active/s0";
const B = "titan/tp2/llama3-debug/f32/n2/active/s0";
const OPTIONS = { memorySlack: 0.05, commSlack: 0 };

function skipAll(c: CellJson): CellJson {
  return { ...c, checks: c.checks.map((x) => ({ ...x, status: "skip" as const, message: "not applicable" })) };
}

function file(cells: CellJson[]): ResultFile {
  return { cells, summary: { ...summarizeJson(cells) } };
}

async function gate(base: ResultFile, now: ResultFile, ...extra: string[]) {
  const dir = tempDir();
  const b = join(dir, "baseline.json");
  const r = join(dir, "results.json");
  writeFileSync(b, JSON.stringify(base));
  writeFileSync(r, JSON.stringify(now));
  return cli(["gate", "--baseline", b, "--results", r, ...extra]);
}

describe("gate: a check that passed and no longer ran is a regression", () => {
  it("a passing check now skipped fails the gate, naming the cell, the check and the skip's reason", async () => {
    const base = synthFile([synthCell(A), synthCell(B)]);
    const now = synthFile([
      synthCell(A, { checks: synthCell(A).checks.map((x) => (x.id === "parity.norm" ? { ...x, status: "skip" as const, message: "subject declined" } : x)) }),
      synthCell(B),
    ]);
    const v = compareResults(base, now, OPTIONS);
    expect(v.regressions).toEqual([{ kind: "now-skipped", cell: A, where: "parity.norm", message: "was pass, now skipped: subject declined" }]);
    const r = await gate(base, now);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("1 check now skipped");
    expect(r.stdout).toMatch(/\| check now skipped \| `bucketed\/dp_shard2\/llama3-debug\/f32\/n2\/active\/s0` \| parity\.norm \| was pass, now skipped: subject declined \|/);
  });

  it("a passing check missing from the results fails the gate", async () => {
    const base = synthFile([synthCell(A)]);
    const now = synthFile([synthCell(A, { checks: synthCell(A).checks.filter((x) => x.id !== "comm.budget") })]);
    const v = compareResults(base, now, OPTIONS);
    expect(v.regressions).toEqual([{ kind: "missing-check", cell: A, where: "comm.budget", message: "was pass, missing from the results" }]);
    const r = await gate(base, now);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("| check missing |");
  });

  it("a check skipped in both, or failing in the baseline and skipped now, is not a regression", () => {
    const skipped = (status: "skip" | "fail") =>
      synthFile([synthCell(A, { checks: [...synthCell(A).checks, { id: "grad.clip", status, message: "x" }] })]);
    expect(compareResults(skipped("skip"), skipped("skip"), OPTIONS).regressions).toEqual([]);
    expect(compareResults(skipped("fail"), skipped("skip"), OPTIONS).regressions).toEqual([]);
  });
});

describe("gate: nothing judged is not 'no regression'", () => {
  it("fails when every check of the results skipped, saying nothing was judged", async () => {
    const base = synthFile([skipAll(synthCell(A))]);
    const now = synthFile([skipAll(synthCell(A))]);
    const r = await gate(base, now);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("nothing was judged");
    expect(r.stdout).not.toContain("no regression");
    expect(compareResults(base, now, OPTIONS).judged).toBe(0);
  });

  it("fails on an empty results file against an empty baseline, and on cells without checks", async () => {
    const empty = await gate(file([]), file([]));
    expect(empty.code).toBe(1);
    expect(empty.stdout).toContain("nothing was judged");
    expect(empty.stdout).not.toContain("no regression");
    const bare = file([synthCell(A, { checks: [] })]);
    const r = await gate(bare, bare);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("nothing was judged");
  });

  it("fails when no cell of the results is in the baseline (nothing gated)", async () => {
    const r = await gate(file([]), synthFile([synthCell(A)]));
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("nothing was judged");
    expect(r.stdout).not.toContain("no regression");
  });

  it("writes the same verdict to --md", async () => {
    const dir = tempDir();
    const md = join(dir, "gate.md");
    const r = await gate(file([]), file([]), "--md", md);
    expect(r.code).toBe(1);
    expect(readFileSync(md, "utf8")).toBe(r.stdout);
  });
});

describe("reports: never PASS over nothing", () => {
  const skipped = [skipAll(synthCell(A)), skipAll(synthCell(B))];
  const bare = [synthCell(A, { checks: [] })];
  const cases: [string, CellJson[]][] = [
    ["no cells", []],
    ["every check skipped", skipped],
    ["cells without checks", bare],
  ];

  it("counts a cell in which no check ran as skipped, not passed", () => {
    expect(summarize(bare)).toEqual({ cells: 1, passed: 0, failed: 0, skipped: 1 });
  });

  it.each(cases)("Markdown says NO VERDICT: %s", (_, cells) => {
    const md = renderMarkdown(cells, summarizeJson(cells));
    expect(md).toContain("NO VERDICT: nothing was judged");
    expect(md).not.toContain("PASS");
  });

  it.each(cases)("HTML says NO VERDICT: %s", (_, cells) => {
    const html = renderHtml(cells, summarizeJson(cells));
    const verdict = /<p class="verdict ([a-z-]+)">([^<]*)<\/p>/.exec(html)!;
    expect(verdict[1]).toBe("none");
    expect(verdict[2]).toContain("NO VERDICT: nothing was judged");
    expect(html).not.toMatch(/>PASS/);
  });

  it.each(cases)("JUnit carries an error, so that CI does not show green: %s", (_, cells) => {
    const root = parseXml(renderJunit(cells, summarizeJson(cells)));
    expect(root.attrs.errors).toBe("1");
    const errors = all(root, "testsuite").flatMap((s) => all(s, "testcase")).flatMap((c) => all(c, "error"));
    expect(errors).toHaveLength(1);
    expect(errors[0].attrs.message).toContain("NO VERDICT: nothing was judged");
  });

  it("the JSON report's summary carries the verdict", async () => {
    const dir = tempDir();
    const read = async (cells: CellJson[]) => {
      await writeReports(parseReporters("json"), cells, summarizeJson(cells), dir);
      return JSON.parse(readFileSync(join(dir, "results.json"), "utf8")).summary.verdict;
    };
    expect(await read(skipped)).toBe("no verdict");
    expect(await read([synthCell(A)])).toBe("pass");
    expect(await read([synthCell(A, { checks: [{ id: "parity.norm", status: "fail", message: "off" }] })])).toBe("fail");
  });

  it("`clip-parity report` on an all-skipped file writes no PASS", async () => {
    const dir = tempDir();
    const results = join(dir, "r.json");
    writeFileSync(results, JSON.stringify(file(skipped)));
    const r = await cli(["report", "--results", results, "--report", "md,html", "--out", join(dir, "out")]);
    expect(r.code).toBe(0);
    for (const f of ["summary.md", "report.html"]) {
      const text = readFileSync(join(dir, "out", f), "utf8");
      expect(text, f).toContain("NO VERDICT: nothing was judged");
      expect(text, f).not.toMatch(/\bPASS\b/);
    }
  });

  it("a run with a check that ran still says PASS or FAIL", () => {
    const pass = [synthCell(A), skipAll(synthCell(B))];
    expect(renderMarkdown(pass, summarizeJson(pass))).toContain("**✅ PASS**");
    const fail = [synthCell(A, { checks: [{ id: "parity.norm", status: "fail", message: "off" }] })];
    expect(renderMarkdown(fail, summarizeJson(fail))).toContain("**❌ FAIL**");
  });
});

describe("merge: the same shard twice is refused", () => {
  const X = synthCell("reference/dp_shard2/x");
  const Y = synthCell("reference/tp2/y");

  function shards() {
    const dir = tempDir();
    const a = join(dir, "a.json");
    const b = join(dir, "b.json");
    writeFileSync(a, JSON.stringify(synthFile([X])));
    writeFileSync(b, JSON.stringify(synthFile([Y])));
    return { dir, a, b };
  }

  it("refuses one file given twice (also spelled differently), naming it twice (exit 2)", async () => {
    const { dir, a, b } = shards();
    const out = join(dir, "m.json");
    const r = await cli(["merge", "--out", out, a, b, a]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`merge: ${a} and ${a} are the same file`);
    const other = `${dir}/./a.json`; // join() would normalise it
    const r2 = await cli(["merge", "--out", out, a, other]);
    expect(r2.code).toBe(2);
    expect(r2.stderr).toContain(`merge: ${a} and ${other} are the same file`);
  });

  it("refuses two files that hold the same cells (a copy of one shard), naming both (exit 2)", async () => {
    const { dir, a, b } = shards();
    const copy = join(dir, "a-again.json");
    copyFileSync(a, copy);
    const r = await cli(["merge", "--out", join(dir, "m.json"), a, b, copy]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`merge: ${a} and ${copy} hold the same 1 cell`);
  });

  it("mergeResults refuses the same path twice instead of counting its cells twice", () => {
    const data = synthFile([X, Y]);
    expect(() => mergeResults([{ path: "s.json", data }, { path: "s.json", data }])).toThrow("merge: s.json and s.json are the same file");
  });

  it("still merges files that overlap in part (different matrices sharing cells) and a matrix listing a cell twice", () => {
    const { file: merged } = mergeResults([
      { path: "cpu.json", data: synthFile([X, Y, Y]) },
      { path: "gpu1.json", data: synthFile([X]) },
    ]);
    expect(merged.cells.map((c) => c.id)).toEqual([X.id, Y.id, Y.id]);
  });
});

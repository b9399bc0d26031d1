/**
 * Issue 42: the result file and every report (json, junit, md, html) hold the regression, train and resume
 * sections with their verdicts, and `run` writes them after those sections ran (they used to be written
 * before, so out/cpu.json and the JUnit file could not show a section's failure; only the exit code did).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { REPORTERS, writeReports } from "../../reports/index.ts";
import { renderJunit } from "../../reports/junit.ts";
import { renderMarkdown } from "../../reports/markdown.ts";
import { renderHtml } from "../../reports/html.ts";
import { parseResultFile, summarizeJson } from "../../harness/results/schema.ts";
import { mergeResults } from "../../harness/results/merge.ts";
import type { SectionResult } from "../../harness/results/sections.ts";
import { all, parseXml, synthCell, synthFile, tempDir } from "./fixtures.ts";

const sections: SectionResult[] = [
  {
    kind: "regression",
    matrix: "cpu",
    cases: [
      { id: "regression 0: bucketed tp2", expect: "pass", check: "regression", status: "pass", message: "", met: true, durationMs: 120 },
      { id: "regression 1: bucketed pp2", expect: "pass", check: "parity.norm", status: "fail", message: "rank 1: total norm 2 != reference 3\nmore", met: false, durationMs: 80 },
    ],
  },
  {
    kind: "resume",
    matrix: "cpu",
    subject: "titan-mtp",
    cases: [{ id: "resume drops-step", expect: "fail", check: "resume.equal", status: "fail", message: "step count 3 != 4", met: true, durationMs: 900 }],
  },
];

// the real regression section runs the matrix's fixed fuzz cases (minutes for cpu): a stand-in returns a failing verdict
vi.mock("../../cli/regressions.ts", () => ({
  runRegressionSection: async (matrix: string): Promise<SectionResult> => ({
    kind: "regression",
    matrix,
    cases: [{ id: "regression 1: bucketed pp2", expect: "pass", check: "parity.norm", status: "fail", message: "rank 1: total norm 2 != reference 3", met: false }],
  }),
}));

const cells = [synthCell("good/dp_shard2/llama3-debug/f32/n2/active/s0")];
const summary = summarizeJson(cells);

describe("sections in every report", () => {
  it("json: the sections with their cases, counts and verdicts, and the run's verdict failed by a section alone", async () => {
    const dir = tempDir();
    await writeReports([REPORTERS.json!], cells, summary, dir, { sections });
    const j = JSON.parse(readFileSync(join(dir, "results.json"), "utf8"));
    expect(j.summary.verdict).toBe("fail"); // every cell passed: only the regression section failed
    expect(j.sections.map((s: { kind: string; verdict: string }) => `${s.kind} ${s.verdict}`)).toEqual(["regression fail", "resume pass"]);
    expect(j.sections[0].summary).toEqual({ cases: 2, asExpected: 1, unexpected: 1 });
    expect(j.sections[0].cases[1]).toMatchObject({ id: "regression 1: bucketed pp2", check: "parity.norm", met: false });
    // and it reads back as a result file, sections included
    expect(parseResultFile(j, "results.json").sections).toHaveLength(2);
  });

  it("junit: a testsuite per section; an unmet expectation a failure, a known-bad case caught a pass with a property", () => {
    const root = parseXml(renderJunit(cells, summary, { sections }));
    const suite = all(root, "testsuite").find((s) => s.attrs.name === "regression section (cpu)")!;
    expect(suite.attrs).toMatchObject({ tests: "2", failures: "1" });
    const failed = all(suite, "testcase").find((c) => c.attrs.name === "regression 1: bucketed pp2")!;
    expect(all(failed, "failure")[0]!.attrs.message).toBe("expected pass, got parity.norm fail: rank 1: total norm 2 != reference 3");
    const resume = all(root, "testsuite").find((s) => s.attrs.name === "resume section (cpu, titan-mtp)")!;
    const caught = all(resume, "testcase")[0]!;
    expect(all(caught, "failure")).toEqual([]);
    expect(all(all(caught, "properties")[0]!, "property")[0]!.attrs).toMatchObject({ name: "expected" });
    expect(root.attrs.failures).toBe("1");
    expect(root.attrs.tests).toBe("4");
  });

  it("md and html: each section's verdict line and the cases not as expected", () => {
    const md = renderMarkdown(cells, summary, { sections });
    expect(md).toContain("**❌ FAIL**");
    expect(md).toContain("regression section (cpu): FAIL: 2 cases, 1 as expected, 1 not");
    expect(md).toContain("resume section (cpu, titan-mtp): PASS: 1 cases, 1 as expected, 0 not");
    expect(md).toMatch(/\| regression section \(cpu\) \| `regression 1: bucketed pp2` \| pass \| `parity.norm` fail \|/);
    const html = renderHtml(cells, summary, { sections });
    expect(html).toMatch(/<header id="summary" data-verdict="fail"/);
    expect(html).toContain(`<article class="section" data-kind="regression" data-verdict="fail" data-cases="2" data-unexpected="1">`);
    expect(html).toContain(`<article class="section" data-kind="resume" data-verdict="pass"`);
    expect(html.match(/<tr class="section-case" data-met="false">/g)).toHaveLength(1);
  });

  it("merge keeps the sections of the file that holds them", () => {
    const withSections = { ...synthFile(cells), sections };
    const other = synthFile([synthCell("good/tp2/llama3-debug/f32/n2/active/s0")]);
    const { file } = mergeResults([
      { path: "a.json", data: parseResultFile(withSections, "a.json") },
      { path: "b.json", data: other },
    ]);
    expect(file.sections?.map((s) => s.kind)).toEqual(["regression", "resume"]);
  });
});

describe("clip-parity run writes the result file and the reports after the sections ran", () => {
  it("a regression section that fails is in --json and in every report, and the run exits 1", async () => {
    const { run } = await import("../../cli/run.ts");
    const dir = tempDir();
    const matrix = join(dir, "m.json");
    writeFileSync(matrix, JSON.stringify({ name: "tiny-sections", subjects: ["bucketed"], cases: [{ layout: "tp2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" }] }));
    const out = vi.spyOn(process.stdout, "write").mockImplementation(() => true);
    const err = vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    let code: number;
    const printed: string[] = [];
    out.mockImplementation((s) => (printed.push(String(s)), true));
    try {
      code = await run(["--matrix", matrix, "--json", join(dir, "r.json"), "--out", join(dir, "reports"), "--quiet"]);
    } finally {
      out.mockRestore();
      err.mockRestore();
    }
    expect(code, printed.join("")).toBe(1);
    const j = JSON.parse(readFileSync(join(dir, "r.json"), "utf8"));
    expect(j.summary.failed).toBe(0);
    expect(j.sections).toEqual([expect.objectContaining({ kind: "regression", verdict: "fail" })]);
    const report = JSON.parse(readFileSync(join(dir, "reports", "results.json"), "utf8"));
    expect(report.summary.verdict).toBe("fail");
    expect(readFileSync(join(dir, "reports", "junit.xml"), "utf8")).toContain(`<testsuite name="regression section (tiny-sections)" tests="1" failures="1"`);
    expect(readFileSync(join(dir, "reports", "summary.md"), "utf8")).toContain("regression section (tiny-sections): FAIL");
    expect(readFileSync(join(dir, "reports", "report.html"), "utf8")).toContain(`data-kind="regression" data-verdict="fail"`);
  }, 120_000);
});

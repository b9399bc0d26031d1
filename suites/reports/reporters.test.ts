/**
 * The reporters (JSON, JUnit, Markdown, HTML) on a small real run, the JUnit file against its schema's
 * required fields, escaping of hostile text, and `run --report ... --out DIR` end to end.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseReporters, REPORTER_NAMES, REPORTERS, reportSessionFromEnv, writeReports } from "../../reports/index.ts";
import { renderJunit, xmlEscape } from "../../reports/junit.ts";
import { renderMarkdown } from "../../reports/markdown.ts";
import { renderHtml } from "../../reports/html.ts";
import { parseResultFile, summarizeJson } from "../../harness/results/schema.ts";
import { all, cli, parseXml, smallReport, smallRun, SMALL_CELLS, synthCell, tempDir, tinyMatrixFile, type XmlElement } from "./fixtures.ts";

const NONNEG_INT = /^(0|[1-9]\d*)$/;

/** The required fields of the JUnit schema (Jenkins/Surefire) and that the counts add up. */
function checkJunitSchema(root: XmlElement): void {
  expect(root.name).toBe("testsuites");
  const suites = all(root, "testsuite");
  expect(suites.length).toBeGreaterThan(0);
  const total = { tests: 0, failures: 0, errors: 0, skipped: 0 };
  for (const s of suites) {
    for (const a of ["name", "tests", "failures", "errors", "skipped"]) expect(s.attrs, `testsuite ${s.attrs.name} lacks ${a}`).toHaveProperty(a);
    for (const a of ["tests", "failures", "errors", "skipped"]) expect(s.attrs[a]).toMatch(NONNEG_INT);
    const cases = all(s, "testcase");
    expect(s.children.every((c) => c.name === "testcase")).toBe(true);
    expect(Number(s.attrs.tests)).toBe(cases.length);
    expect(Number(s.attrs.failures)).toBe(cases.filter((c) => all(c, "failure").length).length);
    expect(Number(s.attrs.skipped)).toBe(cases.filter((c) => all(c, "skipped").length).length);
    expect(Number(s.attrs.errors)).toBe(cases.filter((c) => all(c, "error").length).length);
    for (const c of cases) {
      expect(c.attrs.name, "testcase name").toBeTruthy();
      expect(c.attrs.classname, "testcase classname").toBeTruthy();
      for (const f of all(c, "failure")) expect(f.attrs.message, "failure message").toBeTruthy();
      expect(all(c, "failure").length + all(c, "skipped").length + all(c, "error").length).toBeLessThanOrEqual(1);
    }
    total.tests += Number(s.attrs.tests);
    total.failures += Number(s.attrs.failures);
    total.errors += Number(s.attrs.errors);
    total.skipped += Number(s.attrs.skipped);
  }
  for (const [k, v] of Object.entries(total)) expect(Number(root.attrs[k]), `testsuites ${k}`).toBe(v);
}

describe("JUnit XML", () => {
  it("has one testcase per cell (classname the subject), a testsuite per subject, and every required field", async () => {
    const report = await smallReport();
    const root = parseXml(renderJunit(report.cells, report.summary, { matrix: "small", backend: "cpu" }));
    checkJunitSchema(root);
    const suites = all(root, "testsuite");
    expect(suites.map((s) => s.attrs.name)).toEqual(["reference", "hf-replicate"]);
    const cases = suites.flatMap((s) => all(s, "testcase"));
    expect(cases.map((c) => `${c.attrs.classname} ${c.attrs.name}`)).toEqual(report.cells.map((c) => `${c.subject} ${c.id}`));
    // a failing cell: each failing check's id and first line in the message, each full message in the body
    const hf = report.cells.find((c) => c.subject === "hf-replicate" && c.layout.dp_shard === 2)!;
    const tc = cases.find((c) => c.attrs.name === hf.id)!;
    const f = all(tc, "failure")[0];
    const failed = hf.checks.filter((x) => x.status === "fail");
    expect(failed.map((x) => x.id)).toEqual(expect.arrayContaining(["memory.peak", "comm.budget", "scaling.nonempty"]));
    expect(f.attrs.type).toBe(failed.map((x) => x.id).join(","));
    expect(f.attrs.message).toBe(failed.map((x) => `${x.id}: ${x.message.split("\n")[0]}`).join("; "));
    for (const x of failed) expect(f.text).toContain(`${x.id}: ${x.message}`);
    expect(Number(root.attrs.failures)).toBe(report.cells.filter((c) => c.checks.some((x) => x.status === "fail")).length);
    expect(Number(root.attrs.tests)).toBe(report.cells.length);
  });

  it("escapes hostile text and drops characters XML cannot hold", () => {
    const nasty = `<script>&"quotes" 'apos' ]]> \u0001\u0008 tab\tand\nnewline`;
    const cell = synthCell(`we<ird>&"sub'/dp_shard2`, {
      checks: [
        { id: "parity.norm", status: "fail", message: nasty },
        { id: "comm.budget", status: "skip", message: nasty },
      ],
    });
    const skipped = synthCell(`we<ird>&"sub'/tp2`, { checks: [{ id: "comm.budget", status: "skip", message: nasty }] });
    const xml = renderJunit([cell, skipped], summarizeJson([cell, skipped]));
    const root = parseXml(xml);
    checkJunitSchema(root);
    const tc = all(all(root, "testsuite")[0], "testcase");
    expect(all(root, "testsuite")[0].attrs.name).toBe(`we<ird>&"sub'`);
    expect(tc[0].attrs.name).toBe(cell.id);
    const clean = nasty.replace(/[\u0001\u0008]/g, "\uFFFD");
    expect(all(tc[0], "failure")[0].text).toBe(`parity.norm: ${clean}`);
    expect(all(tc[0], "failure")[0].attrs.message).toBe(`parity.norm: ${clean.split("\n")[0]}`);
    expect(all(tc[1], "skipped")[0].attrs.message).toBe(`comm.budget: ${clean}`); // newlines kept as &#10; in attributes
    expect(xmlEscape("a&b")).toBe("a&amp;b");
  });
});

describe("Markdown", () => {
  it("tables subjects by layout, groups the failures, then folds every failing cell with check, message and reproduction", async () => {
    const report = await smallReport();
    const md = renderMarkdown(report.cells, report.summary, { matrix: "small", backend: "cpu" });
    const lines = md.split("\n");
    const header = lines.find((l) => l.startsWith("| subject"))!;
    expect(header).toBe("| subject \\ layout | single | dp\\_shard2 |"); // "_" escaped: text, never emphasis
    expect(lines).toContain("| reference | ✅ 1/1 | ✅ 1/1 |");
    expect(lines.find((l) => l.startsWith("| hf-replicate"))).toMatch(/❌ 0\/1/);
    expect(md).toContain(`**❌ FAIL**: ${report.summary.cells} cells`);
    const failing = report.cells.filter((c) => c.checks.some((x) => x.status === "fail"));
    expect(md).toContain(`<details><summary>Every failing cell (${failing.length})`);
    for (const c of failing) {
      expect(md).toContain(`#### \`${c.id}\``);
      expect(md).toContain(c.repro);
    }
    expect(md).toContain("- **memory.peak**");
    expect(md).not.toContain("reproduce: npx"); // the runner's trailer is shown once, as the command
  });

  it("escapes table cells and cuts long failure lists", () => {
    const cells = Array.from({ length: 5 }, (_, i) =>
      synthCell(`a|b/dp_shard2/x${i}`, { checks: [{ id: "parity.norm", status: "fail", message: "```\nboom" }] }),
    );
    const md = renderMarkdown(cells, summarizeJson(cells), {}, { maxFailures: 2 });
    expect(md).toContain("| a\\|b |");
    expect(md).toContain("… and 3 more failing cells");
    expect(md).toContain("````\n```\nboom\n````"); // a fence the message cannot close
  });
});

describe("reporter registry", () => {
  it("names json, junit, md, html, each with hooks that are all optional", () => {
    expect(REPORTER_NAMES).toEqual(["json", "junit", "md", "html"]);
    for (const r of Object.values(REPORTERS)) expect(typeof r.onRunEnd).toBe("function");
    expect(parseReporters("md,json,md").map((r) => r.name)).toEqual(["md", "json"]);
    expect(() => parseReporters("json,xml")).toThrow(/unknown reporter "xml"; allowed: json, junit, md, html/);
  });

  it("writes every report from the JSON shape, and the json report reads back as the --json shape", async () => {
    const report = await smallReport();
    const dir = tempDir();
    const written = await writeReports(parseReporters("json,junit,md,html"), report.cells, report.summary, dir, { matrix: "small" });
    expect(written.map((p) => p.slice(dir.length + 1))).toEqual(["results.json", "junit.xml", "summary.md", "report.html"]);
    const back = parseResultFile(JSON.parse(readFileSync(join(dir, "results.json"), "utf8")), "results.json");
    expect(back).toEqual({ ...report, summary: { ...report.summary, verdict: "fail" } }); // the verdict spelled out
    const html = readFileSync(join(dir, "report.html"), "utf8");
    expect(html).toBe(renderHtml(report.cells, report.summary, { matrix: "small" }));
    expect(html).not.toMatch(/<(link|img|iframe)\b|\bsrc=|https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
    expect(html.match(/<details class="cell /g)).toHaveLength(SMALL_CELLS.length);
  });

  it("gives npm test's matrix suite a session from CLIP_PARITY_REPORT / CLIP_PARITY_OUT", async () => {
    expect(reportSessionFromEnv({}, {})).toBeNull();
    const dir = tempDir();
    const session = reportSessionFromEnv({ matrix: "small" }, { CLIP_PARITY_REPORT: "md,junit", CLIP_PARITY_OUT: dir })!;
    expect(session.reporters.map((r) => r.name)).toEqual(["md", "junit"]);
    const { results, summary } = await smallRun();
    expect(await session.finish(results, summary)).toEqual([join(dir, "summary.md"), join(dir, "junit.xml")]);
    expect(readFileSync(join(dir, "summary.md"), "utf8")).toContain("matrix small");
    expect(() => reportSessionFromEnv({}, { CLIP_PARITY_REPORT: "nope" })).toThrow(/unknown reporter "nope"/);
  });

  it("`run --report ... --out DIR` writes the reports; an unknown reporter is exit 2 with the allowed names", async () => {
    const dir = tempDir();
    const matrix = tinyMatrixFile(dir);
    const env = { CI: undefined, CLIP_PARITY_GOLDEN_DIR: join(dir, "golden") };
    const bad = await cli(["run", "--matrix", matrix, "--report", "json,pdf", "--quiet"], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--report: unknown reporter "pdf"; allowed: json, junit, md, html');
    const out = join(dir, "out");
    const r = await cli(["run", "--matrix", matrix, "--filter", "/dp_shard2/", "--report", "junit,md", "--out", out, "--json", join(dir, "r.json"), "--quiet"], env);
    expect(r.code).toBe(1); // hf-replicate fails
    expect(r.stderr).toContain(`wrote ${join(out, "junit.xml")}`);
    const junit = parseXml(readFileSync(join(out, "junit.xml"), "utf8"));
    checkJunitSchema(junit);
    expect(all(junit, "testsuite").map((s) => s.attrs.name)).toEqual(["reference", "hf-replicate"]);
    expect(readFileSync(join(out, "summary.md"), "utf8")).toContain("## clip-parity: matrix tiny on cpu");
    const json = JSON.parse(readFileSync(join(dir, "r.json"), "utf8"));
    expect(json.summary).toEqual({ cells: 2, passed: 1, failed: 1, skipped: 0 });
    expect(json.cells[0].comm[0].byKind).toBeTypeOf("object");
  });
});

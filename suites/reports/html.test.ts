/**
 * The HTML report of a small real run, rendered in headless Chromium (Debian's chromium package,
 * driven by playwright-core): the grid and the charts are there, a cell's details open on demand, the
 * failures follow grouped by subject and check with the first cell's command, and the page makes no
 * network request.
 *
 * Skipped, with a message, only when /usr/bin/chromium is absent and CI is not set (browser.ts).
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { renderHtml } from "../../reports/html.ts";
import type { ResultFile } from "../../harness/results/schema.ts";
import { openBrowser, openReport, skipBrowser as skip, SKIP_REASON, type Browser } from "./browser.ts";
import { smallReport } from "./fixtures.ts";

if (skip) console.warn(`suites/reports/html.test.ts: skipping the headless Chromium test: ${SKIP_REASON}`);

describe.skipIf(skip)(`HTML report in headless Chromium${skip ? ` (skipped: ${SKIP_REASON})` : ""}`, () => {
  let report: ResultFile;
  let browser: Browser;
  let page: Page;
  let url: string;

  beforeAll(async () => {
    report = await smallReport();
    const dir = mkdtempSync(join(tmpdir(), "clip-parity-html-"));
    const file = join(dir, "report.html");
    writeFileSync(file, renderHtml(report.cells, report.summary, { matrix: "small", backend: "cpu" }));
    url = pathToFileURL(file).href;
    browser = await openBrowser();
    page = browser.page;
    await openReport(page, file);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
  });

  it("shows the matrix grid: rows subjects, columns layouts, one square per cell coloured by outcome", async () => {
    await expect.poll(() => page.getAttribute("body", "data-ready")).toBe("true");
    expect(await page.locator("#grid").isVisible()).toBe(true);
    const rows = await page.locator("#grid > tbody > tr").evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-subject")));
    expect(rows).toEqual(["reference", "hf-replicate"]);
    const cols = await page.locator("#grid > thead th.layout").allTextContents();
    expect(cols).toEqual(["single", "dp_shard2"]);
    expect(await page.locator("#grid details.cell").count()).toBe(report.cells.length);
    const failing = report.cells.filter((c) => c.checks.some((x) => x.status === "fail"));
    expect(await page.locator("#grid details.cell.fail").count()).toBe(failing.length);
    expect(await page.locator("#grid details.cell.pass").count()).toBe(report.cells.length - failing.length);
    const colours = await page.locator("#grid details.cell > summary").evaluateAll((ss) => ss.map((s) => getComputedStyle(s).backgroundColor));
    expect(new Set(colours).size).toBe(2); // pass and fail look different
  });

  it("draws peak scratch per rank against its budget, and collectives per rank, as inline SVG", async () => {
    const chart = page.locator("svg#memory-chart");
    expect(await chart.isVisible()).toBe(true);
    const box = await chart.boundingBox();
    expect(box!.width).toBeGreaterThan(100);
    expect(box!.height).toBeGreaterThan(100);
    const ranks = report.cells.reduce((n, c) => n + c.memory.length, 0); // one cell per subject and layout here
    expect(await chart.locator("rect.bar").count()).toBe(ranks);
    expect(await chart.locator("line.budget").count()).toBe(ranks);
    const over = report.cells.flatMap((c) => c.memory.filter((m) => m.scratchPeakBytes > m.budgetBytes)).length;
    expect(over).toBeGreaterThan(0); // hf-replicate all-gathers every gradient
    expect(await chart.locator("rect.bar.over").count()).toBe(over);
    const hf = report.cells.find((c) => c.subject === "hf-replicate" && c.layout.dp_shard === 2)!;
    const bar = chart.locator(`g.row[data-subject="hf-replicate"] rect.bar[data-layout="dp_shard2"][data-rank="1"]`);
    expect(Number(await bar.getAttribute("data-value"))).toBe(hf.memory[1].scratchPeakBytes);
    expect(Number(await bar.getAttribute("data-limit"))).toBe(hf.memory[1].budgetBytes);
    expect(await bar.locator("title").textContent()).toContain("(OVER)");
    const comm = page.locator("svg#comm-chart");
    expect(await comm.isVisible()).toBe(true);
    expect(await comm.locator("rect.bar").count()).toBe(ranks);
    const commBar = comm.locator(`g.row[data-subject="hf-replicate"] rect.bar[data-layout="dp_shard2"][data-rank="0"]`);
    expect(Number(await commBar.getAttribute("data-value"))).toBe(hf.comm[0].collectives);
  });

  it("puts the grid and charts before the failures, grouped by subject and check, each with the first cell's command", async () => {
    const order = await page.evaluate(() => ["summary", "grid", "memory-chart", "comm-chart", "failures"].map((id) => document.getElementById(id)!.getBoundingClientRect().top + window.scrollY));
    expect([...order].sort((a, b) => a - b)).toEqual(order);
    const failing = report.cells.filter((c) => c.checks.some((x) => x.status === "fail"));
    const groups = page.locator("#failures article.group");
    const pairs = failing.flatMap((c) => c.checks.filter((x) => x.status === "fail").map((x) => `${c.subject} ${x.id}`));
    const counted = await groups.evaluateAll((as) => as.map((a) => [`${a.getAttribute("data-subject")} ${a.getAttribute("data-check")}`, Number(a.getAttribute("data-cells"))] as const));
    expect(counted.reduce((n, [, k]) => n + k, 0)).toBe(pairs.length);
    expect(new Set(counted.map(([k]) => k))).toEqual(new Set(pairs));
    const first = groups.first();
    const id = await first.locator("a.first-cell").textContent();
    const cell = report.cells.find((c) => c.id === id)!;
    expect(await first.locator("code.repro-command").textContent()).toBe(cell.repro);
  });

  it("opens a cell's details on demand: checks, per-rank memory and collectives, reproduction", async () => {
    const hf = report.cells.find((c) => c.subject === "hf-replicate" && c.layout.dp_shard === 2)!;
    const cell = page.locator(`#grid details.cell[data-cell-id="${hf.id}"]`);
    const panel = cell.locator(".detail");
    expect(await panel.isVisible()).toBe(false);
    await cell.locator("summary").click();
    expect(await panel.isVisible()).toBe(true);
    expect(await panel.locator("h4").textContent()).toBe(hf.id);
    expect(await panel.locator('tr.check[data-check="memory.peak"] td').first().textContent()).toBe("fail");
    expect(await panel.locator("table.ranks tbody tr").count()).toBe(hf.memory.length);
    expect(await panel.locator('table.ranks tr[data-rank="0"] td.over').count()).toBeGreaterThan(0);
    expect(await panel.locator("code.repro-command").textContent()).toBe(hf.repro);
    await page.keyboard.press("Escape");
    expect(await panel.isVisible()).toBe(false);

    // a group lists the cell one click away, and the link opens it
    const link = page.locator(`#failures article.group[data-check="memory.peak"] li.group-cell a`).filter({ hasText: hf.id });
    await page.locator(`#failures article.group[data-check="memory.peak"] details.group-cells > summary`).click();
    await link.click();
    expect(await panel.isVisible()).toBe(true);
    await panel.locator("button.close").click();
    expect(await panel.isVisible()).toBe(false);

    await page.locator("#only-fail").check();
    expect(await page.locator("#grid details.cell.pass").first().isVisible()).toBe(false);
    expect(await page.locator("#grid details.cell.fail").first().isVisible()).toBe(true);
    await page.locator("#only-fail").uncheck();
  });

  it("made no network request and raised no error", async () => {
    expect(browser.requests.filter((u) => u !== url)).toEqual([]);
    const resources = await page.evaluate(() => performance.getEntriesByType("resource").map((e) => e.name));
    expect(resources).toEqual([]);
    expect(browser.problems).toEqual([]);
  });
});

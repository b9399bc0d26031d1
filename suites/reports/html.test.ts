/**
 * The HTML report of a small real run, rendered in headless Chromium (Debian's chromium package,
 * driven by playwright-core): the grid and the charts are there, a cell's details open on demand, the
 * failing cells come first with their reproduction command, and the page makes no network request.
 *
 * Skipped, with a message, only when /usr/bin/chromium is absent and CI is not set; under CI=true it
 * always runs (and fails if chromium is missing: `apt-get install -y chromium`).
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BrowserContext, Page } from "playwright-core";
import { renderHtml } from "../../reports/html.ts";
import { isCI } from "../../harness/util/env.ts";
import type { ResultFile } from "../../harness/results/schema.ts";
import { smallReport } from "./fixtures.ts";

const CHROMIUM = "/usr/bin/chromium";
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const skip = !existsSync(CHROMIUM) && !isCI();
const SKIP_REASON = `${CHROMIUM} is absent and CI is not set (install it with: apt-get install -y chromium)`;
if (skip) console.warn(`suites/reports/html.test.ts: skipping the headless Chromium test: ${SKIP_REASON}`);

describe.skipIf(skip)(`HTML report in headless Chromium${skip ? ` (skipped: ${SKIP_REASON})` : ""}`, () => {
  let report: ResultFile;
  let context: BrowserContext;
  let page: Page;
  let url: string;
  let userDataDir: string;
  const requests: string[] = [];
  const problems: string[] = [];

  beforeAll(async () => {
    expect(existsSync(CHROMIUM), `CI=true: ${CHROMIUM} is required (apt-get install -y chromium)`).toBe(true);
    report = await smallReport();
    const dir = mkdtempSync(join(tmpdir(), "clip-parity-html-"));
    const file = join(dir, "report.html");
    writeFileSync(file, renderHtml(report.cells, report.summary, { matrix: "small", backend: "cpu" }));
    url = pathToFileURL(file).href;
    userDataDir = mkdtempSync(join(tmpdir(), "clip-parity-chromium-"));
    const { chromium } = await import("playwright-core");
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: ARGS,
      viewport: { width: 1400, height: 900 },
      offline: true,
    });
    page = context.pages()[0] ?? (await context.newPage());
    context.on("request", (r) => requests.push(r.url()));
    page.on("websocket", (w) => requests.push(w.url()));
    page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
    page.on("console", (m) => {
      if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`);
    });
    await page.goto(url, { waitUntil: "load" });
  }, 60_000);

  afterAll(async () => {
    await context?.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
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

  it("lists the failing cells first, each with its failed checks and reproduction command", async () => {
    const order = await page.evaluate(() => {
      const f = document.getElementById("failures")!;
      const g = document.getElementById("grid")!;
      return Boolean(f.compareDocumentPosition(g) & Node.DOCUMENT_POSITION_FOLLOWING);
    });
    expect(order).toBe(true);
    const failing = report.cells.filter((c) => c.checks.some((x) => x.status === "fail"));
    const articles = page.locator("#failures article.failure");
    expect(await articles.count()).toBe(failing.length);
    for (const [i, c] of failing.entries()) {
      const a = articles.nth(i);
      expect(await a.getAttribute("data-cell-id")).toBe(c.id);
      expect(await a.locator("code.repro-command").textContent()).toBe(c.repro);
      const checks = await a.locator("code.check").allTextContents();
      expect(checks).toEqual(c.checks.filter((x) => x.status === "fail").map((x) => x.id));
    }
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

    // the failure list links to the cell, which opens
    await page.locator(`#failures article.failure[data-cell-id="${hf.id}"] h3 a`).click();
    expect(await panel.isVisible()).toBe(true);
    await panel.locator("button.close").click();
    expect(await panel.isVisible()).toBe(false);

    await page.locator("#only-fail").check();
    expect(await page.locator("#grid details.cell.pass").first().isVisible()).toBe(false);
    expect(await page.locator("#grid details.cell.fail").first().isVisible()).toBe(true);
    await page.locator("#only-fail").uncheck();
  });

  it("made no network request and raised no error", async () => {
    expect(requests.filter((u) => u !== url)).toEqual([]);
    const resources = await page.evaluate(() => performance.getEntriesByType("resource").map((e) => e.name));
    expect(resources).toEqual([]);
    expect(problems).toEqual([]);
  });
});

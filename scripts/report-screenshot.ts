/**
 * The README's pictures of the HTML report, taken from a real run rather than drawn by hand: the run a
 * new user tries first (gpu4 on the cpu backend with titan, hf-replicate and the known-bad no-pp-reduce),
 * rendered in headless Chromium (Debian's chromium, driven by playwright-core).
 *
 *   npx tsx scripts/report-screenshot.ts     # writes docs/report.png (the top) and docs/report-failures.png
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { chromium } from "playwright-core";
import { main } from "../cli/main.ts";

export const REPORT_RUN = ["run", "--matrix", "gpu4", "--backend", "cpu", "--subject", "titan", "--subject", "hf-replicate", "--subject", "no-pp-reduce", "--golden", "off", "--quiet"];
const DOCS = fileURLToPath(new URL("../docs/", import.meta.url));
const CHROMIUM = "/usr/bin/chromium";

const dir = mkdtempSync(join(tmpdir(), "clip-parity-screenshot-"));
try {
  const code = await main([...REPORT_RUN, "--report", "html", "--out", dir]);
  if (code !== 1) throw new Error(`the report run exited ${code}; expected 1 (hf-replicate and no-pp-reduce fail)`);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--headless", "--disable-gpu"] });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(pathToFileURL(join(dir, "report.html")).href);
    await page.waitForSelector('body[data-ready="true"]', { state: "attached" });
    await page.screenshot({ path: join(DOCS, "report.png") });
    await page.locator("#failures").screenshot({ path: join(DOCS, "report-failures.png") });
  } finally {
    await browser.close();
  }
  console.log(`wrote ${join(DOCS, "report.png")} and ${join(DOCS, "report-failures.png")}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}

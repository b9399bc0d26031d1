/**
 * Headless Chromium for the HTML report suites (Debian's chromium package, driven by playwright-core):
 * offline, no network, every request, page error and console warning recorded so that a test can
 * assert there were none.
 *
 * Skipped, with a message, only when /usr/bin/chromium is absent and CI is not set; under CI=true the
 * suites always run (and fail if chromium is missing: `apt-get install -y chromium`).
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { BrowserContext, Page } from "playwright-core";
import { isCI } from "../../harness/util/env.ts";

export const CHROMIUM = "/usr/bin/chromium";
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

export const skipBrowser = !existsSync(CHROMIUM) && !isCI();
export const SKIP_REASON = `${CHROMIUM} is absent and CI is not set (install it with: apt-get install -y chromium)`;

export interface Browser {
  context: BrowserContext;
  page: Page;
  /** Every URL the page asked for (the report's own file included). */
  requests: string[];
  /** Page errors and console errors or warnings. */
  problems: string[];
  close(): Promise<void>;
}

export async function openBrowser(viewport = { width: 1400, height: 900 }): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`CI=true: ${CHROMIUM} is required (apt-get install -y chromium)`);
  const userDataDir = mkdtempSync(join(tmpdir(), "clip-parity-chromium-"));
  const { chromium } = await import("playwright-core");
  const context = await chromium.launchPersistentContext(userDataDir, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport, offline: true });
  const page = context.pages()[0] ?? (await context.newPage());
  const requests: string[] = [];
  const problems: string[] = [];
  context.on("request", (r) => requests.push(r.url()));
  page.on("websocket", (w) => requests.push(w.url()));
  page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`);
  });
  return {
    context,
    page,
    requests,
    problems,
    async close() {
      await context.close();
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/** Opens a report file and waits until its script has run; returns the milliseconds that took. */
export async function openReport(page: Page, file: string): Promise<number> {
  const t0 = performance.now();
  await page.goto(pathToFileURL(file).href, { waitUntil: "load" });
  await page.waitForSelector('body[data-ready="true"]', { state: "attached", timeout: 60_000 });
  return performance.now() - t0;
}

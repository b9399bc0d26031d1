/**
 * Reporters by name: `clip-parity run ... --report json,junit,md,html --out DIR`, and
 * `clip-parity report --results FILE --report ... --out DIR` for files (merged shards, another machine).
 *
 * A reporter has optional hooks, as vitest's do; every reporter works from the JSON shape
 * (reports/schema.ts), so a live run and a file render the same:
 *   onRunStart(info, outDir)                   before the first cell
 *   onCellEnd(cell, index, total)              after each cell (the cell as the JSON shape)
 *   onRunEnd(cells, summary, outDir, meta)     at the end; returns the paths it wrote
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { InputError } from "../harness/errors.ts";
import type { CellResult, RunSummary } from "../harness/results/types.ts";
import { catchByField, cellJson } from "../harness/results/json.ts";
import { sectionsField } from "../harness/results/sections.ts";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { renderJunit } from "./junit.ts";
import { renderMarkdown } from "./markdown.ts";
import { renderHtml } from "./html.ts";
import type { CellJson } from "../harness/results/schema.ts";
import { runVerdict, type ReportMeta } from "./common.ts";
import { envValue } from "../harness/util/env.ts";

export type { ReportMeta } from "./common.ts";
export type { CellJson, ResultFile } from "../harness/results/schema.ts";

export interface RunStartInfo {
  total: number;
  meta: ReportMeta;
}

export interface Reporter {
  name: string;
  description: string;
  /** The file it writes in the output folder. */
  file?: string;
  onRunStart?(info: RunStartInfo, outDir: string): void | Promise<void>;
  onCellEnd?(cell: CellJson, index: number, total: number): void | Promise<void>;
  onRunEnd?(cells: readonly CellJson[], summary: RunSummary, outDir: string, meta: ReportMeta): string[] | void | Promise<string[] | void>;
}

function fileReporter(
  name: string,
  file: string,
  description: string,
  render: (cells: readonly CellJson[], summary: RunSummary, meta: ReportMeta) => string,
): Reporter {
  return {
    name,
    file,
    description,
    onRunEnd(cells, summary, outDir, meta) {
      const path = join(outDir, file);
      writeFileAtomic(path, render(cells, summary, meta));
      return [path];
    },
  };
}

/** The summary with its verdict spelled out (the sections' included), so that a script reading it cannot take nothing for a pass. */
function summaryWithVerdict(cells: readonly CellJson[], summary: RunSummary, meta: ReportMeta) {
  const verdict = runVerdict(cells, summary, meta.sections);
  return { ...summary, verdict: verdict === "none" ? "no verdict" : verdict };
}

export const REPORTERS: Record<string, Reporter> = {
  json: fileReporter("json", "results.json", "the --json shape: every cell, its checks, memory and collectives; the regression, train and resume sections", (cells, summary, meta) =>
    JSON.stringify({ cells, summary: summaryWithVerdict(cells, summary, meta), ...catchByField(meta.catchBy), ...sectionsField(meta.sections) }, null, 2) + "\n",
  ),
  junit: fileReporter("junit", "junit.xml", "JUnit XML: a testsuite per subject, a testcase per cell and check", renderJunit),
  md: fileReporter("md", "summary.md", "Markdown for CI job summaries: subjects x layouts, then the failing cells", (c, s, m) => renderMarkdown(c, s, m)),
  html: fileReporter("html", "report.html", "one self-contained HTML page: the matrix grid, memory and collectives per rank", renderHtml),
};

export const REPORTER_NAMES = Object.keys(REPORTERS);

/** "json,junit" -> the reporters, in that order; an unknown name is an InputError listing the allowed ones. */
export function parseReporters(text: string, flag = "--report"): Reporter[] {
  const names = text.split(",").map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new InputError(`${flag}: "${text}" names no reporter; allowed: ${REPORTER_NAMES.join(", ")}`);
  const out: Reporter[] = [];
  for (const name of names) {
    const r = REPORTERS[name];
    if (!r) throw new InputError(`${flag}: unknown reporter "${name}"; allowed: ${REPORTER_NAMES.join(", ")}`);
    if (!out.includes(r)) out.push(r);
  }
  return out;
}

/** Runs every reporter's onRunEnd on a finished set of cells; returns the paths written. */
export async function writeReports(
  reporters: readonly Reporter[],
  cells: readonly CellJson[],
  summary: RunSummary,
  outDir: string,
  meta: ReportMeta = {},
): Promise<string[]> {
  mkdirSync(outDir, { recursive: true });
  const written: string[] = [];
  for (const r of reporters) {
    const paths = await r.onRunEnd?.(cells, summary, outDir, meta);
    if (paths) written.push(...paths);
  }
  return written;
}

export const DEFAULT_OUT_DIR = "reports-out";

/**
 * What a run tells its reporters as it goes; structurally the runner's hooks (harness/run/runner.ts
 * RunHooks), declared here so that reports/ depends on the result types alone.
 */
export interface ReportHooks {
  onRunStart?(info: { total: number; backend: string }): void;
  onCellEnd?(result: CellResult, index: number, total: number, done: number): void;
}

/**
 * The reporters of one `run`: validated before any cell runs. `--report` without `--out` writes to
 * reports-out/; `--out` without `--report` writes every report.
 */
export interface ReportSession {
  reporters: Reporter[];
  outDir: string;
  meta: ReportMeta;
  /** Runner hooks that feed onRunStart/onCellEnd. */
  hooks: ReportHooks;
  /** Writes the reports; returns the paths. `extra` adds to the meta (e.g. the backend the run used). */
  finish(results: readonly CellResult[], summary: RunSummary, notes?: string[], extra?: ReportMeta): Promise<string[]>;
}

export function reportSession(report: string | undefined, out: string | undefined, meta: ReportMeta = {}): ReportSession | null {
  if (report === undefined && out === undefined) return null;
  const reporters = parseReporters(report ?? REPORTER_NAMES.join(","));
  const outDir = out ?? DEFAULT_OUT_DIR;
  const session: ReportSession = {
    reporters,
    outDir,
    meta,
    hooks: {
      onRunStart(info) {
        for (const r of reporters) void r.onRunStart?.({ total: info.total, meta: { ...meta, backend: meta.backend ?? info.backend } }, outDir);
      },
      onCellEnd(result, index, total) {
        const hooked = reporters.filter((r) => r.onCellEnd);
        if (hooked.length === 0) return;
        const cell = cellJson(result) as CellJson;
        for (const r of hooked) void r.onCellEnd!(cell, index, total);
      },
    },
    async finish(results, summary, notes, extra) {
      const cells = results.map((r) => cellJson(r) as CellJson);
      const m: ReportMeta = { ...meta, ...extra };
      return writeReports(reporters, cells, summary, outDir, notes?.length ? { ...m, notes: [...(m.notes ?? []), ...notes] } : m);
    },
  };
  return session;
}

/**
 * For `npm test` (suites/matrix.test.ts): CLIP_PARITY_REPORT=json,junit,md,html and/or
 * CLIP_PARITY_OUT=DIR (scripts/test.mjs maps `--report` / `--out` onto them, as it does --matrix)
 * give a session whose `finish(results, summary)` writes the reports after the suite; null otherwise.
 */
export function reportSessionFromEnv(meta: ReportMeta = {}, env: NodeJS.ProcessEnv = process.env): ReportSession | null {
  return reportSession(envValue("CLIP_PARITY_REPORT", env), envValue("CLIP_PARITY_OUT", env), meta);
}

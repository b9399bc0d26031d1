/**
 * What the reporters share: the run's description, grouping of cells into the subject x layout grid,
 * and number formatting. Everything works from the JSON shape (reports/schema.ts), so a report can be
 * rendered from a live run, a merged set of shards or a file from another machine alike.
 */
import { formatLayout, LAYOUT_AXES, type Layout } from "../harness/layout/layout.ts";
import { cellJsonFailed, type CellJson } from "../harness/results/schema.ts";
import { cellSkipped, verdictOf, type Verdict } from "../harness/results/summary.ts";
import type { RunSummary } from "../harness/results/types.ts";
import { sectionsFailed, type SectionResult } from "../harness/results/sections.ts";

/** What a report says about the run it describes; every field optional. */
export interface ReportMeta {
  title?: string;
  matrix?: string;
  backend?: string;
  /** "i/n" when the run was one shard. */
  shard?: string;
  /** ISO time; the reporters add none themselves, so that a report is reproducible. */
  generatedAt?: string;
  /** Extra lines (e.g. the golden's verdict) shown under the summary. */
  notes?: string[];
  /** The known-bad subjects of the run and the checks that must catch each: their failures are shown as expected. */
  catchBy?: CatchBy;
  /** The regression, train and resume sections the run judged after its cells; each reporter shows them and their verdicts. */
  sections?: readonly SectionResult[];
}

/** subject -> the checks that must catch it (a known-bad subject's `catchBy`). */
export type CatchBy = Readonly<Record<string, readonly string[]>>;

/** A subject's declared catchBy: own keys only, since a subject may be named `constructor` or `__proto__`. */
export function declaredCatchBy(catchBy: CatchBy | undefined, subject: string): readonly string[] | undefined {
  return catchBy !== undefined && Object.hasOwn(catchBy, subject) ? catchBy[subject] : undefined;
}

export type Outcome = "pass" | "fail" | "skip";

export function outcomeOf(c: Pick<CellJson, "checks">): Outcome {
  if (cellJsonFailed(c)) return "fail";
  return cellSkipped(c) ? "skip" : "pass";
}

/**
 * The run's verdict as every reporter states it. A summary that counts failures fails even if the cells
 * given do not show them, and so does a section with an expectation not met; PASS needs at least one
 * check that ran.
 */
export function runVerdict(cells: readonly Pick<CellJson, "checks">[], summary: RunSummary, sections?: readonly SectionResult[]): Verdict {
  return summary.failed > 0 || sectionsFailed(sections) ? "fail" : verdictOf(cells);
}

export const VERDICT_TEXT: Record<Verdict, string> = { pass: "PASS", fail: "FAIL", none: "NO VERDICT: nothing was judged" };

/** Why there is no verdict, for the reporters to say under it. */
export const NOTHING_JUDGED = "no check ran (no cells, or every check skipped)";

export function layoutOf(c: Pick<CellJson, "layout">): string {
  return formatLayout(c.layout as Layout);
}

export function worldOf(c: Pick<CellJson, "layout">): number {
  const l = c.layout as Layout;
  return LAYOUT_AXES.filter((a) => a !== "ep").reduce((w, a) => w * l[a], 1);
}

export interface Grid {
  subjects: string[];
  /** Layouts by world size, then in order of first appearance. */
  layouts: string[];
  /** subject -> layout -> cells, in run order. */
  cells: Map<string, Map<string, CellJson[]>>;
}

export function gridOf(cells: readonly CellJson[]): Grid {
  const subjects: string[] = [];
  const layoutOrder = new Map<string, { world: number; first: number }>();
  const grid = new Map<string, Map<string, CellJson[]>>();
  cells.forEach((c, i) => {
    const layout = layoutOf(c);
    if (!layoutOrder.has(layout)) layoutOrder.set(layout, { world: worldOf(c), first: i });
    let row = grid.get(c.subject);
    if (!row) {
      subjects.push(c.subject);
      grid.set(c.subject, (row = new Map()));
    }
    const list = row.get(layout) ?? [];
    list.push(c);
    row.set(layout, list);
  });
  const layouts = [...layoutOrder.entries()].sort((a, b) => a[1].world - b[1].world || a[1].first - b[1].first).map(([l]) => l);
  return { subjects, layouts, cells: grid };
}

export function counts(cells: readonly CellJson[]): Record<Outcome, number> {
  const n = { pass: 0, fail: 0, skip: 0 };
  for (const c of cells) n[outcomeOf(c)]++;
  return n;
}

export function failedChecks(c: Pick<CellJson, "checks">) {
  return c.checks.filter((x) => x.status === "fail");
}


export function formatNormValue(x: number | string | null | undefined): string {
  if (x === null || x === undefined) return "-";
  return String(x);
}

export function describeRun(meta: ReportMeta): string {
  const parts: string[] = [];
  if (meta.matrix) parts.push(`matrix ${meta.matrix}`);
  if (meta.backend) parts.push(`on ${meta.backend}`);
  if (meta.shard) parts.push(`shard ${meta.shard}`);
  return parts.join(" ");
}

export function summaryText(s: { cells: number; passed: number; failed: number; skipped: number }): string {
  return `${s.cells} cells: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`;
}

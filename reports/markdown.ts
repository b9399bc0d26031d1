/**
 * Markdown for CI job summaries ($GITHUB_STEP_SUMMARY), in the order a person reads it: the verdict, the
 * subject x layout grid, one table of failures grouped by subject and check (unexpected ones apart from a
 * known-bad subject's expected ones), and only then, folded inside <details>, every failing cell with its
 * messages and reproduce command. The part outside <details> stays one screen for a run of a few subjects.
 * Long runs are cut inside the fold (GitHub keeps 1 MiB of summary per step) with a count of the rest.
 */
import { severityOf } from "../harness/results/severity.ts";
import type { RunSummary } from "../harness/results/types.ts";
import { counts, describeRun, failedChecks, gridOf, NOTHING_JUDGED, runVerdict, summaryText, VERDICT_TEXT, type ReportMeta } from "./common.ts";
import { firstLine, messageBody } from "../harness/results/text.ts";
import { mdCell, mdCode, mdFence, mdText } from "./escape.ts";
import { expectedHeading, failureDigest, groupKindText, missedText, unexpectedHeading, type FailureGroup } from "./groups.ts";
import type { CellJson } from "../harness/results/schema.ts";
import { sectionSummaryText, sectionTitle, sectionVerdict, type SectionResult } from "../harness/results/sections.ts";

const VERDICT_MARK = { pass: "✅", fail: "❌", none: "⛔" } as const;

export interface MarkdownOptions {
  /** At most this many failing cells are listed in full inside the fold (default 50). */
  maxFailures?: number;
}

function groupRow(g: FailureGroup, kind: boolean): string {
  const first = g.cells[0]!;
  const shapes = g.messages.length > 1 ? ` (${g.messages.length} distinct messages)` : "";
  const cols = [mdText(g.subject), mdCode(g.check, { table: true }), ...(kind ? [mdText(groupKindText(g))] : []), String(g.cells.length), mdCode(first.id, { table: true }), mdCell(firstLine(g.firstMessage)) + shapes];
  return `| ${cols.join(" | ")} |`;
}

/** The sections after the cells' failures: a line per section with its verdict, then every case whose expectation was not met. */
function sectionsMarkdown(sections: readonly SectionResult[]): string[] {
  const out = ["### Sections: regression, train and resume", ""];
  for (const s of sections) out.push(`- ${VERDICT_MARK[sectionVerdict(s)]} ${mdText(sectionSummaryText(s))}`);
  out.push("");
  const unmet = sections.flatMap((s) => s.cases.filter((c) => !c.met).map((c) => ({ s, c })));
  if (unmet.length) {
    out.push("| section | case | expected | got | message |", "|---|---|---|---|---|");
    for (const { s, c } of unmet) out.push(`| ${mdText(sectionTitle(s))} | ${mdCode(c.id, { table: true })} | ${c.expect} | ${mdCode(c.check, { table: true })} ${c.status} | ${mdCell(firstLine(c.message))} |`);
    out.push("");
  }
  return out;
}

export function renderMarkdown(cells: readonly CellJson[], summary: RunSummary, meta: ReportMeta = {}, options: MarkdownOptions = {}): string {
  const maxFailures = options.maxFailures ?? 50;
  const out: string[] = [];
  const what = describeRun(meta);
  const verdict = runVerdict(cells, summary, meta.sections);
  out.push(`## ${mdText(meta.title ?? "clip-parity")}${what ? `: ${mdText(what)}` : ""}`, "");
  out.push(`**${VERDICT_MARK[verdict]} ${VERDICT_TEXT[verdict]}**: ${summaryText(summary)}${verdict === "none" ? `; ${NOTHING_JUDGED}` : ""}`, "");
  for (const note of meta.notes ?? []) out.push(`> ${mdCell(note)}`, "");

  const grid = gridOf(cells);
  if (cells.length) {
    out.push(`| subject \\ layout | ${grid.layouts.map(mdText).join(" | ")} |`);
    out.push(`|---|${grid.layouts.map(() => "---").join("|")}|`);
    for (const subject of grid.subjects) {
      const row = grid.cells.get(subject)!;
      const entries = grid.layouts.map((layout) => {
        const list = row.get(layout);
        if (!list) return " ";
        const n = counts(list);
        const mark = n.fail ? "❌" : n.pass ? "✅" : "⏭️";
        return `${mark} ${n.pass}/${list.length}`;
      });
      out.push(`| ${mdText(subject)} | ${entries.join(" | ")} |`);
    }
    out.push("", "Each entry: passed cells / cells of that subject on that layout (models, dtypes, norms, regimes).", "");
  }

  const digest = failureDigest(cells, meta.catchBy);
  const head = "| subject | check | cells | first cell | first message |\n|---|---|---|---|---|";
  if (digest.unexpected.length || digest.missed.length) {
    out.push(`### ${unexpectedHeading(digest)}`, "");
    for (const m of digest.missed) out.push(`- **missed**: ${mdText(missedText(m))}`);
    if (digest.missed.length) out.push("");
    if (digest.unexpected.length) out.push(head, ...digest.unexpected.map((g) => groupRow(g, false)), "");
  } else if (digest.failingCells) out.push("**Unexpected failures: none.**", "");
  if (digest.expected.length) {
    out.push(`### ${expectedHeading(digest)}`, "");
    out.push("| subject | check | why | cells | first cell | first message |\n|---|---|---|---|---|---|", ...digest.expected.map((g) => groupRow(g, true)), "");
  }

  if (meta.sections?.length) out.push(...sectionsMarkdown(meta.sections));

  const failing = cells.filter((c) => failedChecks(c).length > 0);
  if (failing.length) {
    out.push(`<details><summary>Every failing cell (${failing.length}): messages and the command that reproduces each</summary>`, "");
    for (const c of failing.slice(0, maxFailures)) {
      out.push(`#### ${mdCode(c.id)}`, "");
      for (const check of failedChecks(c)) {
        // correctness: the clip's result is wrong; performance: right, at a cost beyond the fused optimum
        out.push(`- **${mdText(check.id)}** (${severityOf(check)})`, "", mdFence(messageBody(check.message)), "");
      }
      if (c.repro) out.push("Reproduce:", "", mdFence(c.repro, "sh"), "");
    }
    if (failing.length > maxFailures) out.push(`… and ${failing.length - maxFailures} more failing cells (see the JSON or HTML report).`, "");
    out.push("</details>", "");
  }
  return out.join("\n");
}

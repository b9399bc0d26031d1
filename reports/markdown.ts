/**
 * Markdown for CI job summaries ($GITHUB_STEP_SUMMARY): the verdict, a table of subjects by layout
 * with passed/total per entry, then the failing cells with their checks, messages and the command that
 * reproduces each. Long runs are cut (GitHub keeps 1 MiB of summary per step) with a count of the rest.
 */
import type { RunSummary } from "../harness/results/types.ts";
import { counts, describeRun, failedChecks, gridOf, messageBody, NOTHING_JUDGED, runVerdict, summaryText, VERDICT_TEXT, type ReportMeta } from "./common.ts";
import { mdCell, mdCode, mdFence, mdText } from "./escape.ts";
import type { CellJson } from "../harness/results/schema.ts";

const VERDICT_MARK = { pass: "✅", fail: "❌", none: "⛔" } as const;

export interface MarkdownOptions {
  /** At most this many failing cells are listed in full (default 50). */
  maxFailures?: number;
}

export function renderMarkdown(cells: readonly CellJson[], summary: RunSummary, meta: ReportMeta = {}, options: MarkdownOptions = {}): string {
  const maxFailures = options.maxFailures ?? 50;
  const out: string[] = [];
  const what = describeRun(meta);
  const verdict = runVerdict(cells, summary);
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
        return `${mark} ${n.pass}/${list.length}${n.fail ? ` (${n.fail} failed)` : ""}`;
      });
      out.push(`| ${mdText(subject)} | ${entries.join(" | ")} |`);
    }
    out.push("", "Each entry: passed cells / cells of that subject on that layout (models, dtypes, norms, regimes).", "");
  }

  const failing = cells.filter((c) => failedChecks(c).length > 0);
  if (failing.length) {
    out.push(`### Failing cells (${failing.length})`, "");
    for (const c of failing.slice(0, maxFailures)) {
      out.push(`#### ${mdCode(c.id)}`, "");
      for (const check of failedChecks(c)) {
        out.push(`- **${mdText(check.id)}**`, "", mdFence(messageBody(check.message)), "");
      }
      if (c.repro) out.push("Reproduce:", "", mdFence(c.repro, "sh"), "");
    }
    if (failing.length > maxFailures) out.push(`… and ${failing.length - maxFailures} more failing cells (see the JSON or HTML report).`, "");
  }
  return out.join("\n");
}

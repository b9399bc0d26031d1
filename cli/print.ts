/** What the command line prints about cells: failures, one cell in full, memory per rank. */
import type { CellResult } from "../harness/results/types.ts";
import type { CellJson } from "../harness/results/schema.ts";
import { escapeControls, terminalText } from "../harness/util/controls.ts";
import { expectedHeading, failureDigest, groupKindText, missedText, unexpectedHeading, type FailureGroup } from "../reports/groups.ts";
import type { CatchBy } from "../reports/common.ts";

/** One group as the terminal shows it: subject x check, how many cells, the first message, one reproduce line. */
function groupText(g: FailureGroup, mark: string): string {
  const first = g.cells[0]!;
  const n = g.cells.length;
  const lines = [`${mark} ${escapeControls(g.subject)} x ${escapeControls(g.check)}: ${n} cell${n === 1 ? "" : "s"}${g.kind === "also" ? ` (${groupKindText(g)})` : ""}`];
  lines.push(`     first: ${escapeControls(first.id)}`);
  lines.push(`     ${terminalText(g.firstMessage).replace(/\n/g, "\n     ")}`);
  if (g.messages.length > 1) lines.push(`     (${g.messages.length} distinct messages beyond numbers; the reports list them)`);
  if (first.repro) lines.push(`     reproduce: ${escapeControls(first.repro)}`);
  return `${lines.join("\n")}\n`;
}

/**
 * The failures of a run grouped as the reports group them (reports/groups.ts): unexpected ones first, one
 * block per subject x check with the first message and one reproduce line; a known-bad subject failing
 * as expected apart, one line per group; a known-bad subject that nothing caught as MISSED.
 */
export function printFailures(cells: readonly CellJson[], out: NodeJS.WritableStream, catchBy: CatchBy = {}): void {
  const d = failureDigest(cells, catchBy);
  if (d.unexpected.length || d.missed.length) {
    out.write(`${unexpectedHeading(d)}\n`);
    for (const m of d.missed) out.write(`MISSED ${escapeControls(missedText(m))}\n`);
    for (const g of d.unexpected) out.write(groupText(g, "FAIL"));
  }
  if (d.expected.length) {
    out.write(`${expectedHeading(d)}\n`);
    for (const g of d.expected) {
      const n = g.cells.length;
      out.write(`  expected ${escapeControls(g.subject)} x ${escapeControls(g.check)}: ${n} cell${n === 1 ? "" : "s"} (${groupKindText(g)})\n`);
    }
  }
}

/** One cell as `clip-parity cell` shows it: norms, every check, the phase profile, memory per rank. */
export function printCell(r: CellResult, out: NodeJS.WritableStream): void {
  out.write(`${escapeControls(r.id)}\n  norm ${r.totalNorm}  reference ${r.referenceNorm}  clip_coef ${r.clipCoef}  max_norm ${r.maxNorm}\n`);
  for (const c of r.checks) out.write(`  ${c.status.padEnd(4)} ${c.id}${c.message ? `: ${terminalText(c.message).replace(/\n/g, "\n       ")}` : ""}\n`);
  if (r.verdict) out.write(verdictText(r.verdict));
  if (r.timings) {
    const t = r.timings;
    const phases = (["plan", "reference", "allocate", "generate", "subject", "collectives", "checks", "free"] as const)
      .map((p) => `${p} ${t[p].toFixed(1)}`)
      .join(", ");
    out.write(`  time (ms): ${phases}; total ${t.total.toFixed(1)}\n`);
  }
  if (r.memory.length) out.write(memoryTable(r));
}

/** A cause's shortest reproduction (`#minimal`) as the one line `python -c` takes: its lines joined, comments dropped. */
export function minimalOneLine(code: string): string {
  return code
    .split("\n")
    .map((l) => l.replace(/\s+#.*$/, ""))
    .join("; ");
}

/** A failing torch: cell's severity and causes, as docs/frameworks.md reads them (harness/external/causes.ts). */
export function verdictText(v: NonNullable<CellResult["verdict"]>): string {
  const lines = [`  severity: ${v.severity}${v.severity === "performance note" ? " (not a failure)" : ""}${v.outside ? `; outside the framework's configurations: ${v.outside}` : ""}`];
  for (const c of v.causes) {
    lines.push(`    cause (${c.severity}): ${terminalText(c.text)}${c.source ? ` [${c.source}]` : ""}; upstream: ${terminalText(c.upstream)}`);
    if (c.minimal) lines.push(`      in one process: python -c ${JSON.stringify(terminalText(minimalOneLine(c.minimal)))}`);
  }
  return lines.map((l) => `${l}\n`).join("");
}

/** Per rank: gradient bytes, scratch peak against budget, the ledger's stages and collectives. */
export function memoryTable(r: CellResult): string {
  const fmt = (n: number) => n.toLocaleString("en-US");
  const stageNames = [...new Set(r.memory.flatMap((m) => m.stages.map((s) => s.stage)))];
  const onDevice = r.memory.some((m) => m.stages.some((s) => s.deviceFreeBytes !== undefined));
  const head = ["rank", "grads", "scratch peak", "budget", ...stageNames.map((s) => `${s} (live/peak${onDevice ? "; device free/total" : ""})`), "collectives", "comm bytes"];
  const rows = r.memory.map((m) => [
    String(m.rank),
    fmt(m.gradBytes),
    fmt(m.scratchPeakBytes),
    fmt(m.budgetBytes),
    ...stageNames.map((name) => {
      const s = m.stages.find((x) => x.stage === name);
      if (!s) return "-";
      const dev = s.deviceFreeBytes !== undefined ? `; ${fmt(s.deviceFreeBytes)}/${fmt(s.deviceTotalBytes ?? 0)}` : "";
      return `${fmt(s.liveBytes)}/${fmt(s.peakBytes)}${dev}`;
    }),
    String(r.comm[m.rank]?.calls ?? 0),
    fmt(r.comm[m.rank]?.bytes ?? 0),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => `  ${cells.map((c, i) => c.padStart(widths[i]!)).join("  ")}\n`;
  return `  memory (bytes) and collectives per rank:\n${line(head)}${rows.map(line).join("")}`;
}

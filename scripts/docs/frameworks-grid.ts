/**
 * The two views of docs/frameworks.md a person reads first: one verdict line per framework, and a grid of the bug
 * classes that have hit every framework against the frameworks (pass / fail / n/a / not run), each entry linking
 * the framework's cells. Both read only the committed data and the frameworks' explain entries.
 */
import { loadHistoryRows, type HistoryRow } from "../../harness/external/torch/history.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { getModel } from "../../harness/model/models.ts";
import { stageOfParam } from "../../harness/model/plan.ts";
import { cellSeverity, rootCause, SEVERITY_SCALE, type CauseSeverity } from "../../harness/external/causes.ts";
import type { FrameworkCellRecord, FrameworksData } from "../../harness/external/frameworks-run.ts";

const esc = (s: string) => s.replace(/\|/g, "\\|").replace(/\n/g, " ");

/** A case's parts: layout/model/dtype/nP/regime/sS. */
function parts(c: string) {
  const [layout, model, dtype, norm, regime] = c.split("/") as [string, string, string, string, string];
  return { layout: parseLayout(layout), model: getModel(model), dtype, norm, regime };
}

/** Some rank holds no gradient: the `empty` regime, or a pipeline stage that holds no parameter. */
function someRankWithoutGradient(c: string): boolean {
  const { layout, model, regime } = parts(c);
  if (regime === "empty") return true;
  if (layout.pp === 1) return false;
  const held = new Set(model.params.map((p) => stageOfParam(p, model.nLayers, layout.pp)));
  return held.size < layout.pp;
}

/**
 * The bug classes of the grid, in the page's column order: which cells try each, the checks whose failure there is
 * that bug, and how specific the class is (`rank`, lower first). A failing cell is counted in the most specific class
 * it tries and fails a check of: a pipeline stage without gradients that raises is "a rank with no gradient", not
 * also "mixed meshes" because its model has experts.
 */
export const BUG_CLASSES: readonly { name: string; tries: (c: string) => boolean; checks: readonly string[]; rank: number }[] = [
  { name: "PP norm reduced", tries: (c) => parts(c).layout.pp > 1, checks: ["parity.norm", "parity.ranks"], rank: 2 },
  { name: "tied and MTP copies counted once", tries: (c) => parts(c).model.ties.length > 0, checks: ["parity.norm", "scaling.replicas"], rank: 3 },
  { name: "every gradient scaled", tries: () => true, checks: ["parity.tensors", "scaling.nonempty"], rank: 5 },
  { name: "scratch O(local shard)", tries: () => true, checks: ["memory.peak", "memory.leak"], rank: 6 },
  { name: "mixed meshes", tries: (c) => parts(c).model.params.some((p) => p.tp === "expert"), checks: ["errors.raised", "liveness", "parity.norm"], rank: 4 },
  { name: "a rank with no gradient", tries: someRankWithoutGradient, checks: ["errors.raised", "liveness", "parity.norm"], rank: 0 },
  { name: "non-finite handling", tries: (c) => parts(c).regime.startsWith("nonfinite"), checks: ["errors.nonfinite", "parity.norm"], rank: 1 },
];

/** The bug class a failing cell is counted in: the most specific one it tries and fails a check of; null for none. */
export function bugClassOf(c: Pick<FrameworkCellRecord, "case" | "failed">): string | null {
  const hit = BUG_CLASSES.filter((k) => k.tries(c.case) && c.failed.some((id) => k.checks.includes(id))).sort((a, b) => a.rank - b.rank);
  return hit[0]?.name ?? null;
}

/** A failure for the page: a cell in the framework's configurations whose severity is above a performance note. */
function isFailure(c: FrameworkCellRecord, explain: Record<string, string>): boolean {
  const s = c.status === "fail" ? cellSeverity(c, explain) : null;
  return s !== null && s !== "performance note";
}

/** The anchor of a framework's section (GitHub's heading slug of `## name (package version)`). */
export function sectionAnchor(f: FrameworksData["frameworks"][number]): string {
  const heading = `${f.name}${f.version ? ` (${f.package} ${f.version})` : ""}`;
  return "#" + heading.toLowerCase().replace(/[^\w\- ]/g, "").replace(/ /g, "-");
}

/** One grid entry: how a framework fares on one bug class. */
export function gridEntry(f: FrameworksData["frameworks"][number], cls: (typeof BUG_CLASSES)[number], explain: Record<string, string>): string {
  if (f.version === null) return "not run";
  const trying = f.cells.filter((c) => cls.tries(c.case));
  const ran = trying.filter((c) => (c.status === "pass" || c.status === "fail") && !c.outside);
  if (!ran.length) {
    if (trying.some((c) => c.status === "not run")) return "not run";
    return "n/a";
  }
  const failing = ran.filter((c) => isFailure(c, explain) && bugClassOf(c) === cls.name);
  const link = sectionAnchor(f);
  return failing.length ? `[**fail** ${failing.length} of ${ran.length}](${link})` : `[pass ${ran.length}](${link})`;
}

export function gridSection(d: FrameworksData, explain: Record<string, Record<string, string>>): string[] {
  const o = [
    "",
    "## Bug classes",
    "",
    "The bugs that have hit every framework, against each framework's cells in its configurations that try them (a cell's " +
      "failure, not a performance note, counts in the most specific class it tries and fails a check of: a rank with no gradient, " +
      "then non-finite handling, PP, tied copies, mixed meshes, scaling, scratch): " +
      "*pass N* (N cells tried, none failed), ***fail** K of N*, *n/a* (no cell of its configurations tries it: outside them, or not " +
      "built by the adapter), *not run* (it cannot run on these CPU ranks or does not import). Each entry links the framework's " +
      "section, whose *every cell* table lists the cells.",
    "",
    `| framework | ${BUG_CLASSES.map((c) => c.name).join(" | ")} |`,
    `|---|${BUG_CLASSES.map(() => "---").join("|")}|`,
  ];
  for (const f of d.frameworks) o.push(`| ${f.name} | ${BUG_CLASSES.map((c) => gridEntry(f, c, explain[f.name] ?? {})).join(" | ")} |`);
  o.push("", "What each class's cells are and which checks judge it:", "");
  o.push(
    ...[
      "PP norm reduced: layouts with pp > 1; parity.norm, parity.ranks",
      "tied and MTP copies counted once: models with tied copies (deepseek-v3-debug's MTP embedding); parity.norm, scaling.replicas",
      "every gradient scaled: every cell; parity.tensors, scaling.nonempty",
      "scratch O(local shard): every cell; memory.peak, memory.leak",
      "mixed meshes: models with expert parameters (dense and expert gradients on two meshes); errors.raised, liveness, parity.norm",
      "a rank with no gradient: the empty regime, or a pipeline stage that holds no parameter; errors.raised, liveness, parity.norm",
      "non-finite handling: the nonfinite regimes; errors.nonfinite, parity.norm",
    ].map((l) => `- ${l}`),
  );
  return o;
}

/**
 * One line per framework, in words: what works (passes in its configurations), what fails (by severity, with its
 * causes), what was not run or built and why.
 */
export function verdictLines(d: FrameworksData, explain: Record<string, Record<string, string>>, rows: readonly HistoryRow[] = loadHistoryRows()): string[] {
  const o = ["", "## Verdicts", ""];
  for (const f of d.frameworks) {
    const name = `[**${f.name}**](${sectionAnchor(f)})`;
    const shipped = historyLinks(f.name, rows);
    if (f.version === null) {
      o.push(`- ${name}: not run: it does not import over the pinned torch${f.error?.includes("--with") ? "; its releases run with `--with` (docs/history.md)" : ""}.${shipped}`);
      continue;
    }
    const ex = explain[f.name] ?? {};
    const cannot = [...new Set(f.cells.filter((c) => c.status === "not run").map((c) => c.cannotRun ?? ""))];
    if (f.cells.length && cannot.length && f.cells.every((c) => c.status === "not run")) {
      o.push(`- ${name} (${f.package} ${f.version}): not run: ${esc(cannot.join("; "))}.`);
      continue;
    }
    const inside = f.cells.filter((c) => (c.status === "pass" || c.status === "fail") && !c.outside);
    const passed = inside.filter((c) => c.status === "pass" && !c.vacuous).length;
    const vacuous = inside.filter((c) => c.status === "pass" && c.vacuous).length;
    const failures = inside.filter((c) => isFailure(c, ex));
    const noteCells = inside.filter((c) => c.status === "fail" && cellSeverity(c, ex) === "performance note");
    const notes = noteCells.length;
    const notBuilt = f.cells.filter((c) => c.status === "n/a").length;
    const bySeverity = SEVERITY_SCALE.filter((s) => s !== "performance note")
      .map((s) => [s, failures.filter((c) => cellSeverity(c, ex) === s)] as const)
      .filter(([, cs]) => cs.length);
    const what = bySeverity.map(([s, cs]) => `${cs.length} ${s} (${causeSummary(cs, ex, s)})`);
    const head = failures.length
      ? `**fails** ${failures.length} of ${inside.length} cells in its configurations: ${what.join("; ")}`
      : !inside.length ? "no cell of its configurations ran here"
      : passed === 0 ? "shows nothing: every pass in its configurations is vacuous"
      : "passes its configurations";
    const rest = [
      inside.length ? `${passed} of ${inside.length} pass${vacuous ? ` (${vacuous} more vacuously)` : ""}` : "",
      notes ? `${notes} with a performance note only${noteCostSummary(noteCells)}` : "",
      notBuilt ? `${notBuilt} not built or not askable (n/a)` : "",
    ].filter(Boolean);
    o.push(`- ${name} (${f.package} ${f.version}): ${head}${rest.length ? `; ${rest.join(", ")}` : ""}.${shipped}`);
  }
  return o;
}

/** The measured cost of a framework's performance notes, in words: " (measured: X to Y us saved per clip)" or "(no measurable cost)". */
function noteCostSummary(cells: readonly FrameworkCellRecord[]): string {
  const costs = cells.map((c) => c.repro?.cost).filter((k) => k !== undefined);
  if (!costs.length) return "";
  const measured = costs.filter((k) => k.measurable).map((k) => Math.round(k.savedS * 1e6));
  const none = costs.length - measured.length;
  const lo = Math.min(...measured);
  const hi = Math.max(...measured);
  const saved = measured.length ? `${lo === hi ? lo : `${lo} to ${hi}`} us saved per clip by one all_reduce in ${measured.length} of ${costs.length} timed` : "";
  return ` (measured: ${[saved, none ? `no measurable cost in ${none} of ${costs.length} timed` : ""].filter(Boolean).join("; ")})`;
}

/** Where a framework has rows in docs/history.md: its shipped bugs, each linking its row there. */
function historyLinks(framework: string, rows: readonly HistoryRow[]): string {
  const mine = rows.filter((r) => r.subject === `torch:${framework}`);
  if (!mine.length) return "";
  return ` Shipped bugs run on the releases that shipped and fixed them (docs/history.md): ${mine.map((r) => `[${r.id}](history.md#${r.id})`).join(", ")}.`;
}

/** The distinct causes of some cells of one severity, with each one's upstream status when known. */
function causeSummary(cells: readonly FrameworkCellRecord[], explain: Record<string, string>, severity: CauseSeverity): string {
  const causes = new Map<string, string>();
  for (const c of cells) {
    for (const k of c.causes) {
      const r = rootCause(k, explain);
      if (r.severity === severity) causes.set(r.text, r.upstream);
    }
  }
  if (!causes.size) return `failed ${[...new Set(cells.flatMap((c) => c.failed))].join(", ")}`;
  return [...causes].map(([text, up]) => `${esc(text)}${up === "not known upstream" ? ", not known upstream" : `; ${esc(up)}`}`).join(" / ");
}

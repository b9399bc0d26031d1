/**
 * docs/frameworks.md, rendered from docs/frameworks.json and nothing else (the run that makes the data is
 * harness/external/frameworks-run.ts): so a test can check that the committed page is exactly the rendering
 * of the committed data. Per framework: failures in configurations it supports, by cause, then outside its
 * configurations, then what cannot run here; then the time per cell.
 */
import { median } from "../../harness/util/stats.ts";
import { COST_PAIRS } from "../../harness/external/note-cost.ts";
import { CHECK_IDS } from "../../harness/checks/index.ts";
import { loadFrameworks } from "../../harness/external/torch/frameworks.ts";
import { parseCellId, reproFileName } from "../../harness/external/torch/export.ts";
import { reproCommand } from "../../harness/cell/cell.ts";
import { causeText, cellSeverity, rootCause, SEVERITY_SCALE, type CauseSeverity, type RootCause } from "../../harness/external/causes.ts";
import { ADAPTER_PHASES, type FrameworkCellRecord, type FrameworkRecord, type FrameworksData } from "../../harness/external/frameworks-run.ts";
import { gridSection, verdictLines } from "./frameworks-grid.ts";

/** Every framework file's `explain`, by framework name. */
export function explanations(): Record<string, Record<string, string>> {
  return Object.fromEntries([...loadFrameworks().values()].map((f) => [f.name, f.explain]));
}

const esc = (s: string) => s.replace(/\|/g, "\\|").replace(/\n/g, " ");

function count<T>(xs: readonly T[], key: (x: T) => string[]): [string, number][] {
  const m = new Map<string, number>();
  for (const x of xs) for (const k of key(x)) m.set(k, (m.get(k) ?? 0) + 1);
  return [...m.entries()];
}

/** Check ids in report order (harness/checks/index.ts), for stable tables. */
const byCheck = (a: [string, number], b: [string, number]) => CHECK_IDS.indexOf(a[0]) - CHECK_IDS.indexOf(b[0]);

/**
 * What a cell that ran shows, as the page counts it: a pass (or a vacuous one), or its severity on the one scale the
 * CLI and the results file use (harness/external/frameworks-run.ts SEVERITY_SCALE). Every severity but a performance
 * note is a failure.
 */
export type CellKind = "pass" | "vacuous" | CauseSeverity;

export function kindOf(c: FrameworkCellRecord, explain: Record<string, string> = {}): CellKind {
  if (c.status === "pass") return c.vacuous ? "vacuous" : "pass";
  return cellSeverity(c, explain) ?? "wrong result";
}

const isFailureKind = (k: CellKind) => k !== "pass" && k !== "vacuous" && k !== "performance note";

/** Why a cell is n/a: the framework's clip cannot be asked it (no such argument), or the adapter cannot build its inputs. */
export function naKind(reason: string): "cannot be asked" | "not built" {
  return /^its clip takes no /.test(reason) ? "cannot be asked" : "not built";
}

/** A framework's cells split as the page reports them: in its configurations, outside them, n/a, not run here. */
function tally(cells: readonly FrameworkCellRecord[], explain: Record<string, string> = {}) {
  const ran = cells.filter((c) => c.status === "pass" || c.status === "fail");
  const inside = ran.filter((c) => !c.outside);
  const outside = ran.filter((c) => c.outside);
  const kinds = inside.map((c) => kindOf(c, explain));
  const na = cells.filter((c) => c.status === "n/a");
  const failures = inside.filter((_, i) => isFailureKind(kinds[i]!));
  return {
    ran: ran.length,
    inside: inside.length,
    passed: kinds.filter((k) => k === "pass").length,
    vacuous: kinds.filter((k) => k === "vacuous").length,
    failed: failures.length,
    bySeverity: Object.fromEntries(SEVERITY_SCALE.map((sv) => [sv, kinds.filter((k) => k === sv).length])) as Record<CauseSeverity, number>,
    performance: kinds.filter((k) => k === "performance note").length,
    outside: outside.length,
    outsideFailed: outside.filter((c) => c.status === "fail").length,
    na: na.length,
    naAsked: na.filter((c) => naKind(c.notApplicable ?? "") === "cannot be asked").length,
    notRun: cells.filter((c) => c.status === "not run").length,
    checks: count(failures, (c) => c.failed).sort(byCheck),
    /** Failures whose exported script was run standalone, and those of them that printed REPRODUCED. */
    reproChecked: failures.filter((c) => c.repro).length,
    reproduced: failures.filter((c) => c.repro?.reproduced).length,
  };
}

/**
 * Cells folded to what tells them apart for a maintainer: the layout and model; the dtype, norm and regime
 * variants of one layout that show the same cause are one entry with their count.
 */
export function foldCells(cases: readonly string[]): string {
  const by = new Map<string, number>();
  for (const c of cases) {
    const k = c.split("/").slice(0, 2).join("/");
    by.set(k, (by.get(k) ?? 0) + 1);
  }
  return [...by].map(([k, n]) => `\`${k}\`${n > 1 ? ` ×${n}` : ""}`).join(", ");
}

/** One row per root cause over `cells` (a framework's, or several frameworks' with the same cause text). */
interface CauseRow {
  cause: RootCause;
  cells: string[];
}

function causeRows(cells: readonly FrameworkCellRecord[], explain: Record<string, string>): CauseRow[] {
  const rows = new Map<string, CauseRow>();
  for (const c of cells) {
    for (const k of c.causes) {
      const cause = rootCause(k, explain);
      // causes whose text is one (a detail that differs in a number) are one root cause
      const row = rows.get(cause.text) ?? { cause, cells: [] };
      if (!row.cells.includes(c.case)) row.cells.push(c.case);
      rows.set(cause.text, row);
    }
  }
  return [...rows.values()].sort((a, b) => b.cells.length - a.cells.length || a.cause.text.localeCompare(b.cause.text));
}

/** A severity as the page prints it: a performance note says it is not a failure. */
const severityText = (sv: CauseSeverity) => (sv === "performance note" ? "performance note (not a failure)" : sv);

/** The rows of one class as a table: cause, severity, the cells folded, the source, the upstream status. */
function causeTableLines(title: string, rows: readonly CauseRow[]): string[] {
  if (!rows.length) return [];
  const o = ["", title, "", "| root cause | severity | cells | source | upstream |", "|---|---|---|---|---|"];
  for (const r of rows) {
    o.push(`| ${esc(r.cause.text)} | ${severityText(r.cause.severity)} | ${r.cells.length}: ${esc(foldCells(r.cells))} | ${r.cause.source ? `\`${esc(r.cause.source)}\`` : "-"} | ${esc(r.cause.upstream)} |`);
  }
  return o;
}

/** Root causes over every framework's cells in its configurations: frameworks whose cause reads the same (one code path) share a row. */
function rootCauseSection(d: FrameworksData, explain: Record<string, Record<string, string>>): string[] {
  const rows = new Map<string, { cause: RootCause; by: [string, number][]; sources: string[]; upstreams: string[]; cells: FrameworkCellRecord[] }>();
  for (const f of d.frameworks) {
    const inside = f.cells.filter((c) => c.status === "fail" && !c.outside);
    for (const r of causeRows(inside, explain[f.name] ?? {})) {
      const key = `${r.cause.severity}\u0000${r.cause.text}`;
      const row = rows.get(key) ?? { cause: r.cause, by: [], sources: [], upstreams: [], cells: [] };
      row.by.push([f.name, r.cells.length]);
      row.cells.push(...inside.filter((c) => r.cells.includes(c.case)));
      // one code path read from several frameworks' files: each file's source and upstream status, once
      if (r.cause.source && !row.sources.includes(r.cause.source)) row.sources.push(r.cause.source);
      if (!row.upstreams.includes(r.cause.upstream)) row.upstreams.push(r.cause.upstream);
      rows.set(key, row);
    }
  }
  if (!rows.size) return [];
  const sorted = [...rows.values()].sort((a, b) => SEVERITY_SCALE.indexOf(a.cause.severity) - SEVERITY_SCALE.indexOf(b.cause.severity));
  const o = [
    "",
    "## Root causes",
    "",
    "Every cause seen in a framework's configurations, one row each: frameworks whose clip fails by the same code path (the same " +
      "explanation) share it, and a cause's dtype, norm and regime variants are counted in its cells, not listed apart. Severity, " +
      "highest first, on the one scale the CLI and the results file print: *wrong result* (returned silently), *raise or hang* (on a " +
      "configuration the framework lists: its users' step stops), *excess memory* (scratch over the clip's budget, or left " +
      "allocated), all three failures; *performance note*, a right result at more collectives than the fused optimum (comm.budget), " +
      "not a failure. Upstream statuses are read from the record as it is.",
    "",
    "| root cause | severity | frameworks (cells) | reproduced by the exported scripts | source | upstream |",
    "|---|---|---|---|---|---|",
  ];
  for (const r of sorted) {
    const where = r.sources.map((x) => `\`${esc(x)}\``).join("; ") || "-";
    o.push(`| ${esc(r.cause.text)} | ${severityText(r.cause.severity)} | ${r.by.map(([n, k]) => `${n} (${k})`).join(", ")} | ${reproOfCells(r.cells)} | ${where} | ${esc(r.upstreams.join("; "))} |`);
  }
  o.push(...noteCostLines(d, explain));
  // where a few lines in one process show a cause, those lines: what a maintainer pastes first
  for (const r of sorted.filter((x) => x.cause.minimal)) {
    const lines = r.cause.minimal!.split("\n");
    o.push("", `In ${lines.length} line${lines.length === 1 ? "" : "s"}, one process, the framework alone (${r.by.map(([n]) => n).join(", ")}): ${esc(r.cause.text)}.`, "", "```python", ...lines, "```");
  }
  o.push(...findingLines(d));
  return o;
}

/** Microseconds, as the cost table prints them. */
const us = (s: number) => `${Math.round(s * 1e6)} us`;

/** What each performance note in a framework's configurations costs per clip, as its exported script measured it. */
export function noteCostLines(d: FrameworksData, explain: Record<string, Record<string, string>>): string[] {
  const notes = d.frameworks.flatMap((f) => f.cells.filter((c) => !c.outside && c.status === "fail" && kindOf(c, explain[f.name]) === "performance note").map((c) => [f.name, c] as const));
  if (!notes.length) return [];
  const o = [
    "",
    `What each performance note costs: its exported script with the fused variant (\`clip-parity export --cell torch:<framework>/<cell> --no-run --cost\`), run with REPRO_COST_PAIRS=${COST_PAIRS}, times the framework's clip against the script's fused variant (\`fused_clip\`: the same norm from the local blocks each rank owns (a replicated block counted once), one all_reduce over every rank, the same scaling; plain tensors, so the saving also holds DTensor's dispatch and is an upper bound on what fusing the reductions alone saves) in ${COST_PAIRS} pairs, order alternating, each call the slowest rank's, on these CPU ranks (gloo). A saving whose interquartile range reaches 0 reads *no measurable cost*.`,
    "",
    "| framework | cell | the clip (median) | fused variant (median) | saved per clip (median; IQR) |",
    "|---|---|---|---|---|",
  ];
  for (const [name, c] of notes) {
    const k = c.repro?.cost;
    const saved = k ? (k.measurable ? `${us(k.savedS)} (${us(k.savedIqrS[0])} to ${us(k.savedIqrS[1])})` : `no measurable cost (${us(k.savedS)}; ${us(k.savedIqrS[0])} to ${us(k.savedIqrS[1])})`) : `not timed${c.repro?.costNotTimed ? `: ${esc(c.repro.costNotTimed)}` : ""}`;
    o.push(`| ${name} | ${c.case} | ${k ? us(k.clipS) : "-"} | ${k ? us(k.fusedS) : "-"} | ${saved} |`);
  }
  return o;
}

/** Each framework's findings: a cause through the framework's own entry point, each run's command and its ranks' lines as recorded. */
export function findingLines(d: FrameworksData): string[] {
  const o: string[] = [];
  for (const f of d.frameworks) {
    for (const x of f.findings ?? []) {
      o.push("", `Through ${f.name}'s own entry point (\`${x.script}\`, torch and ${f.package} alone, CPU ranks): ${esc(x.why)}.`);
      for (const r of x.runs) {
        const ended = r.exitCode === 0 ? "exit 0" : r.exitCode === -1 ? "killed at the time limit" : `exit ${r.exitCode}`;
        o.push("", `${esc(r.label)} (${ended}, ${r.seconds.toFixed(0)} s):`, "", "```", `$ ${r.command}`, ...(r.lines.length ? r.lines : ["(no rank printed its line)"]), "```");
      }
    }
  }
  return o;
}

/** ", N minimised" when some of the scripts run were minimised (the failure is the layout's alone). */
function minimisedNote(checked: readonly FrameworkCellRecord[]): string {
  const n = checked.filter((c) => c.repro?.minimised).length;
  return n ? `, ${n === checked.length ? "all" : n} minimised` : "";
}

/** A root cause's cells reproduced by their scripts: "k of n (scripts of L lines at most, minimised)". */
function reproOfCells(cells: readonly FrameworkCellRecord[]): string {
  const checked = cells.filter((c) => c.repro);
  if (!checked.length) return "not checked";
  const longest = Math.max(...checked.map((c) => c.repro!.lines));
  return `${checked.filter((c) => c.repro!.reproduced).length} of ${cells.length} (${longest} lines at most${minimisedNote(checked)})`;
}

/** "k of n" for the failures whose scripts ran; "-" without failures; "not checked" when none of them ran. */
function reproCell(t: ReturnType<typeof tally>): string {
  if (!t.failed) return "-";
  return t.reproChecked ? `${t.reproduced} of ${t.failed}` : "not checked";
}

/** Where a cell's time goes, per framework, over the gpu4 cells (the first `cases.gpu4` of every list). */
function timeSection(d: FrameworksData): string[] {
  if (!d.native) return [];
  const gpu4 = new Set(Object.keys(d.native.seconds).slice(0, d.cases.gpu4));
  const s3 = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(3));
  const o = [
    "",
    "## Time per cell",
    "",
    `Median seconds over the gpu4 cells each framework ran: the cell's wall time (a session start excluded), the target's own call ` +
      `(the slowest rank, under the adapter's collective and memory monitor) and the adapter's share (the cell's time in the adapter ` +
      `and its files, minus the call: writing and loading the shards, building the DTensors, settling, saving and reading the ` +
      `clipped shards back). The built-in \`${d.native.subject}\` subject, which mirrors torchtitan's clip in process, runs the ` +
      `same ${gpu4.size} cases in a median ${s3(median([...gpu4].map((k) => d.native!.seconds[k]!)))} s per cell.`,
    "",
    "| framework | cells timed | cell | target | adapter | cells whose adapter share is over 0.1 s |",
    "|---|---|---|---|---|---|",
  ];
  for (const f of d.frameworks) {
    const timed = f.cells.filter((c) => c.seconds && gpu4.has(c.case)).map((c) => c.seconds!);
    if (!timed.length) continue;
    const m = (k: "cell" | "target" | "adapter") => s3(median(timed.map((t) => t[k])));
    o.push(`| ${f.name} | ${timed.length} | ${m("cell")} | ${m("target")} | ${m("adapter")} | ${timed.filter((t) => t.adapter > 0.1).length} |`);
  }
  o.push(
    "",
    "The adapter's share by phase (median milliseconds over the same cells; each of a rank's phases the slowest rank's, so they " +
      "overlap): `inputs` the harness writing the shards, `load` a rank mapping them, `meshes` built for a new layout, `params` " +
      "the DTensors and the framework's objects built from them, `settle` waiting for freed tensors before the leak count, " +
      "`writeBack` FSDP1's flat gradient copied back, `save` the clipped shards, `results` reading them back.",
    "",
    `| framework | ${ADAPTER_PHASES.join(" | ")} |`,
    `|---|${ADAPTER_PHASES.map(() => "---").join("|")}|`,
  );
  for (const f of d.frameworks) {
    const timed = f.cells.filter((c) => c.seconds?.phases && gpu4.has(c.case)).map((c) => c.seconds!.phases!);
    if (!timed.length) continue;
    o.push(`| ${f.name} | ${ADAPTER_PHASES.map((k) => (median(timed.map((p) => p[k] ?? 0)) * 1000).toFixed(0)).join(" | ")} |`);
  }
  return o;
}

/** The frameworks whose adapter builds inputs in one precision, read from their cells: each ran every case in it. */
function onePrecision(d: FrameworksData): string {
  const only = d.frameworks.flatMap((f) => {
    const dtypes = new Set(f.cells.map((c) => c.case.split("/")[2]));
    return f.cells.length && dtypes.size === 1 && !dtypes.has("f32") ? [`${f.name} (${[...dtypes][0]})`] : [];
  });
  if (!only.length) return "";
  return ` The adapter builds ${only.join(", ")} in one precision only, so each case runs there in that dtype (harness/external/frameworks-run.ts \`casesFor\`).`;
}

/** The page's opening: title, the do-not-edit note, and what every count below means. */
function introLines(d: FrameworksData): string[] {
  return [
    "# Real frameworks under clip-parity",
    "",
    "<!-- Generated by `npm run frameworks` (harness/external/frameworks-run.ts) from docs/frameworks.json. Do not edit:",
    "     suites/torch/frameworks.test.ts checks that this page is the rendering of that data, and that a fresh run of a subset agrees. -->",
    "",
    `Each framework's clip, called the way its trainer calls it (adapters/torch/frameworks/*.json; \`clip-parity list subjects\`), ` +
      `on ${d.cases.gpu4} gpu4 cells and ${d.cases.distinctShapes} cells of the cpu matrix's distinct shapes (each cpu layout that gpu4 lacks, ` +
      `both debug models, float32, norm 2, active), on the cpu backend: torch ${d.torch}, ${d.backend}, OMP_NUM_THREADS=${d.threads}, ` +
      `a cell that takes more than ${d.cellTimeoutS} s is a hang. Versions are pinned in adapters/torch/requirements*.txt.` +
      onePrecision(d),
    "",
    "A cell is *n/a* for a framework when it asks for what the framework's clip cannot be asked: a norm type other than 2 where no " +
      "function on the path takes `norm_type`, or an error on a non-finite norm where none takes `error_if_nonfinite`.",
    "",
    "A cell is *outside its configurations* when the framework's trainer never builds or asks for it (its file's `configurations`, " +
      "read from its sources: no pipeline stages, no MTP with PP, only some mesh axes or dtypes, the norm type and error flag the " +
      "trainer passes). Those cells still run, and are reported apart: a failure there is not one the framework's maintainers would " +
      "accept. A framework whose clip needs CUDA is *not run* on these CPU ranks. The failures counted below are those in the " +
      "configurations each framework supports.",
    "",
    "A pass is *vacuous* when a clip that does not do the work passes the cell too (harness/external/vacuity.ts: one that returns 0 " +
      "and scales nothing, or one that issues no collective); it is not counted as a pass.",
    "",
    "A failure is *reproduced* when the script `clip-parity export --cell torch:<framework>/<cell> --no-run` writes for it runs " +
      "standalone under `torchrun --standalone` (torch and the framework alone, nothing of clip-parity on the path, CPU ranks) and " +
      "prints REPRODUCED with the same failed checks (those a script implements): `npm run frameworks` runs every such script after " +
      "the cells (harness/external/torch/repro-run.ts). Where the layout alone makes the failure (a raise, a hang or collectives beyond " +
      "the budget, with finite gradients) the script is *minimised*: the first parameter of each pipeline stage and gradient placement, " +
      "random gradients, no norm to compare; one that does not reproduce the failure is followed by the whole cell's (`--full`).",
    "",
    "A failing cell is counted by the highest severity of its root causes (the section *Root causes*), on the one scale " +
      "`clip-parity cell` and the results file print: *wrong result* > *raise or hang* > *excess memory*, each a failure, counted " +
      "in *failed*; a cell whose only finding is more collectives than the fused optimum is a *performance note*, listed apart, not a " +
      "failure. *n/a* splits into cells the framework's clip cannot be asked (no such argument) and cells the adapter does not " +
      "build inputs for (never *outside*: a configuration the framework supports but the adapter does not build is not built). " +
      "A framework none of whose cells ran here reads NOT TESTED, with the reason.",
    "",
  ];
}

/** A framework that did not import, or none of whose cells could run here: nothing of it was tested. */
const notTested = (f: FrameworkRecord, t: ReturnType<typeof tally>) => t.notRun === f.cells.length && f.cells.length > 0;

/** The summary table: one row per framework, its cells counted by how they ended. */
function summaryTableLines(d: FrameworksData, explain: Record<string, Record<string, string>>): string[] {
  const o = [
    "| framework | version | in its configurations | passed | vacuous | failed (wrong result / raise or hang / excess memory) | reproduced | performance notes | " +
      "outside them (failed) | n/a (cannot be asked / not built) | not run here | failed by check |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const f of d.frameworks) o.push(summaryRow(f, explain[f.name] ?? {}));
  return o;
}

/** One framework's row of the summary table. */
function summaryRow(f: FrameworkRecord, ex: Record<string, string>): string {
  if (f.version === null) return `| ${f.name} | does not import | 0 | - | - | - | - | - | - | - | - | ${esc(f.error ?? "")} |`;
  const t = tally(f.cells, ex);
  if (notTested(f, t)) {
    const why = [...new Set(f.cells.map((c) => c.cannotRun ?? ""))].join("; ");
    return `| ${f.name} | ${f.package} ${f.version} | NOT TESTED: ${esc(why)} | - | - | - | - | - | - | - | ${t.notRun} | - |`;
  }
  // a row whose every pass in its configurations is vacuous has shown nothing passing
  const passed = t.passed === 0 && t.vacuous > 0 ? `0 (all ${t.vacuous} passes vacuous)` : `${t.passed}`;
  return (
    `| ${f.name} | ${f.package} ${f.version} | ${t.inside} | ${passed} | ${t.vacuous} | ${t.failed} (${t.bySeverity["wrong result"]} / ${t.bySeverity["raise or hang"]} / ${t.bySeverity["excess memory"]}) | ${reproCell(t)} | ${t.performance} | ` +
    `${t.outside} (${t.outsideFailed}) | ${t.na} (${t.naAsked} / ${t.na - t.naAsked}) | ${t.notRun} | ${t.checks.map(([k, n]) => `${k} ${n}`).join(", ") || "-"} |`
  );
}

/** Where a framework's ranks went when its convention has several paths: per path, its cells passed and failed. */
function pathLines(f: FrameworkRecord): string[] {
  const ranCells = f.cells.filter((c) => c.status === "pass" || c.status === "fail");
  const paths = count(ranCells, (c) => (c.paths.length ? [c.paths.join(" + ")] : []));
  // one path says nothing a reader needs
  if (paths.length <= 1) return [];
  const o = ["", "Paths taken (per cell, the distinct paths of its ranks):", "", "| path | cells | passed | failed |", "|---|---|---|---|"];
  for (const [p, n] of paths) {
    const cs = ranCells.filter((c) => c.paths.join(" + ") === p);
    o.push(`| ${p} | ${n} | ${cs.filter((c) => c.status === "pass").length} | ${cs.filter((c) => c.status === "fail").length} |`);
  }
  return o;
}

/** A framework's counts in one sentence: in its configurations first, what lies outside or did not run after. */
function countsSentence(f: FrameworkRecord, t: ReturnType<typeof tally>): string {
  if (notTested(f, t)) return `NOT TESTED: none of its ${t.notRun} cells ran here.`;
  return (
    `In its configurations, ${t.inside} cells: ${t.passed} passed, ${t.failed} failed${t.vacuous ? `, ${t.vacuous} passed vacuously` : ""}` +
    `${t.performance ? `, ${t.performance} with a performance note only` : ""}.` +
    (t.passed === 0 && t.vacuous > 0 ? ` Every pass is vacuous: these cells show nothing of its clip passing.` : "") +
    (t.outside ? ` Outside them, ${t.outside} cells (${t.outsideFailed} failed).` : "") +
    (t.na ? ` ${t.na} not applicable.` : "") +
    (t.notRun ? ` ${t.notRun} not run here.` : "")
  );
}

/** Per failed check in a framework's configurations: its count and the first failing cell's message. */
function failedCheckLines(t: ReturnType<typeof tally>, inside: readonly FrameworkCellRecord[], ex: Record<string, string>): string[] {
  if (!t.checks.length) return [];
  const o = ["", "| failed check (correctness failures) | cells | one message (first failing cell) |", "|---|---|---|"];
  for (const [k, n] of t.checks) {
    const first = inside.find((c) => c.failed.includes(k) && isFailureKind(kindOf(c, ex)))!;
    o.push(`| ${k} | ${n} | \`${first.case}\`: ${esc(first.messages[k] ?? "")} |`);
  }
  return o;
}

/**
 * For a framework's failures: the line that reruns the first cell of each root cause and the one that writes its
 * standalone script, then how many of the failures their scripts reproduced.
 */
function rerunLines(f: FrameworkRecord, failing: readonly CauseRow[], failures: readonly FrameworkCellRecord[], t: ReturnType<typeof tally>): string[] {
  if (!failures.length) return [];
  const o = ["", "Rerun a listed failure, or write its standalone script (the first cell of each root cause):", ""];
  for (const r of failing) {
    const c = failures.find((x) => r.cells.includes(x.case));
    if (!c) continue;
    const id = `torch:${f.name}/${c.case}`;
    o.push(`- ${esc(r.cause.text.slice(0, 90))}${r.cause.text.length > 90 ? "..." : ""}: \`${reproCommand(parseCellId(id), "cpu")}\`; \`npx clip-parity export --cell ${id} --no-run --out repros\` writes \`repros/${reproFileName(id)}\``);
  }
  const checked = failures.filter((c) => c.repro);
  const longest = Math.max(0, ...checked.map((c) => c.repro!.lines));
  o.push(
    "",
    checked.length
      ? `Reproduced standalone: ${t.reproduced} of ${failures.length} failures (scripts of ${longest} lines at most${minimisedNote(checked)}).`
      : `Reproduced standalone: not checked (this data has no run of the exported scripts).`,
  );
  const not = checked.filter((c) => !c.repro!.reproduced);
  if (not.length) o.push("", `Not reproduced by their scripts (${not.length}): ${not.map((c) => `\`${c.case}\``).join(", ")}.`);
  return o;
}

/** Causes over `cells` as a table of counts, with the first cell of each: for what is reported but not counted as a failure. */
function causeCountLines(cells: readonly FrameworkCellRecord[], title: string, ex: Record<string, string>): string[] {
  // by the cause's text: keys that differ in a detail only (the norm order in an error message) are one cause
  const text = (c: FrameworkCellRecord) => [...new Set(c.causes.map((k) => causeText(k, ex)))];
  const causes = count(cells, text).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  if (!causes.length) return [];
  const o = ["", title, "", "| cells | cause | first cell |", "|---|---|---|"];
  for (const [k, n] of causes) o.push(`| ${n} | ${esc(k)} | \`${cells.find((c) => text(c).includes(k))!.case}\` |`);
  return o;
}

/** The cells not counted in its configurations' verdict, each group with its reason: outside them, n/a, vacuous, not run. */
function setAsideLines(f: FrameworkRecord, inside: readonly FrameworkCellRecord[], ex: Record<string, string>): string[] {
  const o: string[] = [];
  const outside = f.cells.filter((c) => (c.status === "pass" || c.status === "fail") && c.outside);
  for (const [why, n] of count(outside, (c) => [c.outside!])) {
    const cs = outside.filter((c) => c.outside === why);
    o.push("", `Outside its configurations (${n} cells: ${cs.filter((c) => c.status === "pass").length} passed, ${cs.filter((c) => c.status === "fail").length} failed): ${why}.`);
  }
  o.push(...causeCountLines(outside.filter((c) => c.status === "fail"), "What those cells show (not counted as failures):", ex));
  const na = count(f.cells.filter((c) => c.status === "n/a"), (c) => [c.notApplicable ?? ""]);
  for (const [why, n] of na) o.push("", `Not applicable, ${naKind(why) === "cannot be asked" ? "the framework cannot be asked this" : "the adapter does not build this"} (${n} cells): ${why}.`);
  for (const [why, n] of count(inside.filter((c) => c.vacuous), (c) => [c.vacuous!])) o.push("", `Vacuous passes (${n} cells): ${why}.`);
  const notRun = count(f.cells.filter((c) => c.status === "not run"), (c) => [c.cannotRun ?? ""]);
  for (const [why, n] of notRun) o.push("", `Not run here (${n} cells): ${why}.`);
  return o;
}

/** Every cell of a framework with its result, folded away: for the reader who looks one cell up. */
function everyCellLines(f: FrameworkRecord, ex: Record<string, string>): string[] {
  const o = ["", "<details><summary>every cell</summary>", "", "| cell | result | failed checks | causes |", "|---|---|---|---|"];
  for (const c of f.cells) {
    const kind = c.status === "fail" ? kindOf(c, ex) : null;
    const note = kind && kind !== "pass" && kind !== "vacuous" ? ` (${kind})` : "";
    o.push(`| ${c.case} | ${c.status}${note}${c.vacuous ? " (vacuous)" : ""}${c.outside ? " (outside)" : ""} | ${c.failed.join(", ") || "-"} | ${esc(c.causes.join(", ")) || "-"} |`);
  }
  o.push("", "</details>");
  return o;
}

/** One framework's section: what it is, its counts, its failures by root cause and check, how to rerun them, the rest of its cells. */
function frameworkSection(f: FrameworkRecord, ex: Record<string, string>): string[] {
  const o = ["", `## ${f.name}${f.version ? ` (${f.package} ${f.version})` : ""}`, "", `${f.description}.`, "", `Called as: ${f.trainer}.`];
  if (f.version === null) return [...o, "", `Not run: it does not import here: ${f.error}`];
  const t = tally(f.cells, ex);
  o.push(...pathLines(f), "", countsSentence(f, t));
  const inside = f.cells.filter((c) => (c.status === "pass" || c.status === "fail") && !c.outside);
  const rows = causeRows(inside.filter((c) => c.status === "fail"), ex);
  const failing = rows.filter((r) => r.cause.severity !== "performance note").sort((a, b) => SEVERITY_SCALE.indexOf(a.cause.severity) - SEVERITY_SCALE.indexOf(b.cause.severity));
  o.push(...causeTableLines("Failures in its configurations, one row per root cause, highest severity first:", failing));
  o.push(...causeTableLines("Performance notes (the norm is right; more collectives than the fused optimum; not counted as a failure):", rows.filter((r) => r.cause.severity === "performance note")));
  o.push(...failedCheckLines(t, inside, ex));
  o.push(...rerunLines(f, failing, inside.filter((c) => isFailureKind(kindOf(c, ex))), t));
  o.push(...setAsideLines(f, inside, ex));
  o.push(...everyCellLines(f, ex));
  return o;
}

/**
 * The page: summary, then per framework its causes, failed checks with one message each, and every cell.
 * `explain`: per framework, its file's explanations of causes (loadFrameworks by default).
 */
export function renderFrameworks(d: FrameworksData, explain: Record<string, Record<string, string>> = explanations()): string {
  const o = [...introLines(d), ...summaryTableLines(d, explain)];
  o.push(...verdictLines(d, explain));
  o.push(...gridSection(d, explain));
  o.push(...rootCauseSection(d, explain));
  for (const f of d.frameworks) o.push(...frameworkSection(f, explain[f.name] ?? {}));
  // the harness's own timing, below the fold: a reader of the verdicts does not need it first
  o.push(...timeSection(d));
  return o.join("\n") + "\n";
}


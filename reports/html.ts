/**
 * One self-contained HTML page (inline CSS, JS and SVG; a Content-Security-Policy that forbids every
 * fetch, so the page works from a CI artifact, offline, and can never phone home), in the order a person
 * reads it: the picture first, then the failures grouped, every cell one click away:
 *   #summary        the verdict and counts
 *   #filters        subject, check, layout, model and dtype selects and "only failing": they hide grid
 *                   squares, groups and the cells listed in a group that do not match
 *   #grid           the matrix: rows subjects, columns layouts, one square per cell coloured by outcome;
 *                   each square is a <details> whose panel holds the cell's norms, checks, and per-rank
 *                   memory and collectives
 *   #memory-chart   peak scratch per rank against its budget (log scale), per subject and layout
 *   #comm-chart     collectives per rank, per subject and layout
 *   #failures       failures grouped by subject and check (groups.ts): #unexpected, then #expected (a
 *                   known-bad subject's failures, each marked with the check it declares); a group shows
 *                   its cell count, the first message, the command that reruns the first cell, the
 *                   distinct messages when they differ beyond numbers, and links to each of its cells
 * Stable ids and classes (cell pass|fail|skip, data-cell-id, article.group with data-subject,
 * data-check, data-kind, data-cells; bar over, budget) are what tests and scripts may rely on.
 */
import { PERFORMANCE_CHECKS } from "../harness/results/severity.ts";
import type { RunSummary } from "../harness/results/types.ts";
import { counts, describeRun, failedChecks, layoutOf, gridOf, NOTHING_JUDGED, outcomeOf, runVerdict, summaryText, VERDICT_TEXT, type Grid, type ReportMeta } from "./common.ts";
import { formatBytes } from "../harness/results/text.ts";
import { terminalText } from "./escape.ts";
import { expectedHeading, failureDigest, groupKindText, missedText, unexpectedHeading, type FailureDigest, type FailureGroup } from "./groups.ts";
import type { CellJson } from "../harness/results/schema.ts";
import { sectionCounts, sectionSummaryText, sectionTitle, sectionVerdict, type SectionResult } from "../harness/results/sections.ts";

/** Text for an element or attribute: markup characters as entities, control characters as visible escapes. */
export function htmlEscape(text: string): string {
  return terminalText(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}
const h = htmlEscape;

const CSS = `
:root { --pass: #2da44e; --fail: #cf222e; --skip: #8c959f; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #f6f8fa; --bar: #0969da; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink); margin: 0; padding: 1rem 1.5rem 4rem; }
h1 { font-size: 1.4rem; margin: 0 0 .3rem; } h2 { font-size: 1.15rem; margin: 2rem 0 .6rem; border-bottom: 1px solid var(--line); padding-bottom: .3rem; }
code, pre { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre { background: var(--bg); padding: .5rem .7rem; border-radius: 6px; overflow-x: auto; white-space: pre-wrap; margin: .3rem 0; }
nav a { margin-right: 1rem; }
.verdict { font-weight: 600; font-size: 1.05rem; margin: .3rem 0; } .verdict.fail { color: var(--fail); } .verdict.pass { color: var(--pass); } .verdict.none { color: var(--fail); }
.note { color: var(--muted); margin: .2rem 0; }
.failure { border: 1px solid var(--line); border-left: 4px solid var(--fail); border-radius: 6px; padding: .5rem .8rem; margin: .6rem 0; }
.failure h3 { font-size: .95rem; margin: 0 0 .3rem; word-break: break-all; }
.failure ul { margin: .2rem 0; padding-left: 1.2rem; }
.repro { display: flex; gap: .5rem; align-items: center; }
.repro code { background: var(--bg); padding: .25rem .5rem; border-radius: 4px; word-break: break-all; }
button { font: inherit; font-size: 12px; cursor: pointer; }
.grid-wrap, .chart-wrap { overflow-x: auto; max-width: 100%; }
#grid { border-collapse: collapse; }
#grid > * > tr > th, #grid > * > tr > td { border: 1px solid var(--line); padding: 3px 4px; vertical-align: top; }
#grid > thead > tr > th { font-weight: 600; font-size: 12px; white-space: nowrap; writing-mode: vertical-rl; transform: rotate(180deg); text-align: left; }
#grid > thead > tr > th.corner { writing-mode: horizontal-tb; transform: none; vertical-align: bottom; }
#grid > tbody > tr > th { text-align: left; white-space: nowrap; font-weight: 600; }
#grid > tbody > tr > td { min-width: 22px; max-width: 180px; }
details.cell { display: inline-block; margin: 1px; }
details.cell > summary { list-style: none; display: block; width: 13px; height: 13px; border-radius: 2px; cursor: pointer; }
details.cell > summary::-webkit-details-marker { display: none; }
details.cell.pass > summary { background: var(--pass); } details.cell.fail > summary { background: var(--fail); } details.cell.skip > summary { background: var(--skip); }
details.cell[open] > summary { outline: 2px solid var(--ink); outline-offset: 1px; }
details.cell > .detail { position: fixed; top: .8rem; right: .8rem; bottom: .8rem; width: min(760px, 92vw); overflow: auto; z-index: 10;
  background: #fff; border: 1px solid var(--line); border-radius: 8px; box-shadow: 0 8px 30px rgba(0,0,0,.25); padding: .8rem 1rem; }
.detail h4 { margin: 0 2.5rem .5rem 0; word-break: break-all; }
.detail .close { position: absolute; top: .6rem; right: .6rem; }
.detail table { border-collapse: collapse; margin: .6rem 0; width: 100%; } .detail th, .detail td { border: 1px solid var(--line); padding: 2px 6px; text-align: left; vertical-align: top; font-size: 12px; }
.detail td pre { margin: 0; padding: .2rem .4rem; } .detail .checks td:nth-child(3) { width: 100%; }
.detail td.num { text-align: right; font-variant-numeric: tabular-nums; }
.st-pass { color: var(--pass); } .st-fail { color: var(--fail); font-weight: 600; } .st-skip { color: var(--skip); }
.over { color: var(--fail); font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0 .8rem; margin: 0; } dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
.legend span { display: inline-flex; align-items: center; gap: .3rem; margin-right: 1rem; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; }
[hidden] { display: none !important; }
#filters { display: flex; flex-wrap: wrap; gap: .4rem 1rem; align-items: center; margin: .4rem 0 .8rem; }
#filters label { display: inline-flex; gap: .3rem; align-items: center; } #filters select { font: inherit; font-size: 12px; max-width: 16rem; }
.group { border: 1px solid var(--line); border-left: 4px solid var(--fail); border-radius: 6px; padding: .5rem .8rem; margin: .6rem 0; }
.group[data-kind="declared"], .group[data-kind="also"] { border-left-color: var(--skip); }
.group h4 { font-size: .95rem; margin: 0 0 .3rem; } .group h4 .count { font-weight: 400; color: var(--muted); }
.group .kind { font-size: 12px; color: var(--muted); margin-left: .5rem; } .group[data-kind="unexpected"] .kind { color: var(--fail); font-weight: 600; }
.group ul.cells { columns: 2 28rem; margin: .3rem 0; font-size: 12px; } .group details > summary { cursor: pointer; color: var(--bar); }
.missed { color: var(--fail); font-weight: 600; }
svg text { font: 11px system-ui, sans-serif; fill: var(--ink); }
svg .axis { stroke: var(--line); } svg .bar { fill: var(--bar); } svg .bar.over { fill: var(--fail); } svg .budget { stroke: var(--ink); stroke-width: 2; }
svg .row-label { font-weight: 600; } svg .col-label { fill: var(--muted); }
`;

/**
 * The page's script: renders a cell's details panel from the embedded JSON the first time its square
 * is opened (so a matrix of thousands of cells stays a few MB), one panel open at a time, Escape closes,
 * #cell-N in the address opens that cell, a filter for failing cells, copy buttons. DOM built with
 * textContent only: no cell text is ever parsed as HTML.
 */
const SCRIPT = `
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("cells-data").textContent);
  var severity = CHECK_SEVERITY;
  // control and bidi characters shown as escapes, as the server-side text is (escape.ts)
  function shown(x) {
    return String(x).replace(/\\r\\n/g, "\\n").replace(/[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\u2028\\u2029\\u202a-\\u202e\\u2066-\\u2069]/g, function (c) {
      var n = c.charCodeAt(0), hex = n.toString(16);
      return c === "\\r" ? "\\\\r" : n <= 0xff ? "\\\\x" + ("0" + hex).slice(-2) : "\\\\u" + ("000" + hex).slice(-4);
    });
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = shown(text);
    return e;
  }
  function bytes(n) {
    if (typeof n !== "number" || !isFinite(n)) return String(n);
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], x = Math.abs(n), i = 0;
    while (x >= 1024 && i < u.length - 1) { x /= 1024; i++; }
    return (n < 0 ? "-" : "") + (i === 0 ? x : x.toFixed(x >= 100 ? 0 : x >= 10 ? 1 : 2)) + " " + u[i];
  }
  function val(x) { return x === null || x === undefined ? "-" : String(x); }
  function body(m) { return String(m || "").replace(/\\n\\s*reproduce: [\\s\\S]*$/, ""); }
  function layout(l) {
    var axes = ["pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"], parts = [];
    axes.forEach(function (a) { if (l[a] !== 1) parts.push(a + l[a]); });
    return parts.length ? parts.join(",") : "single";
  }
  function table(cls, head, rows) {
    var t = el("table", cls), th = el("thead"), tr = el("tr"), tb = el("tbody");
    head.forEach(function (x) { tr.appendChild(el("th", "", x)); });
    th.appendChild(tr); t.appendChild(th);
    rows.forEach(function (r) { tb.appendChild(r); }); t.appendChild(tb);
    return t;
  }
  function td(text, cls) { return el("td", cls || "", text); }
  function reproBlock(repro) {
    var d = el("div", "repro"); d.appendChild(el("code", "repro-command", repro));
    var b = el("button", "copy", "copy"); b.type = "button"; b.setAttribute("data-copy", shown(repro)); d.appendChild(b);
    return d;
  }
  function render(panel, c) {
    var close = el("button", "close", "\u2715"); close.type = "button"; close.setAttribute("aria-label", "close");
    panel.appendChild(close);
    panel.appendChild(el("h4", "", c.id));
    var facts = [["subject", c.subject], ["layout", layout(c.layout)], ["model", c.model], ["dtype", c.dtype],
      ["norm type", c.normType], ["regime", c.regime], ["seed", c.seed], ["backend", val(c.backend)],
      ["max_norm", val(c.maxNorm)], ["error_if_nonfinite", val(c.errorIfNonfinite)],
      ["total norm (rank 0)", val(c.totalNorm)], ["reference norm", val(c.referenceNorm)], ["clip_coef", val(c.clipCoef)],
      ["duration", c.durationMs === undefined ? "-" : c.durationMs + " ms"]];
    var dl = el("dl", "facts");
    facts.forEach(function (f) { dl.appendChild(el("dt", "", f[0])); dl.appendChild(el("dd", "", f[1])); });
    panel.appendChild(dl);
    panel.appendChild(table("checks", ["status", "check", "message"], c.checks.map(function (x) {
      var tr = el("tr", "check"); tr.setAttribute("data-check", x.id);
      tr.appendChild(td(x.status, "st-" + x.status));
      var code = el("td"); code.appendChild(el("code", "", x.id));
      // what a failure of it means: a wrong result (correctness) or a right one at a cost (performance)
      code.appendChild(el("span", "severity", " " + (x.severity || severity[x.id] || "correctness"))); tr.appendChild(code);
      var msg = el("td"); if (x.message) msg.appendChild(el("pre", "", body(x.message))); tr.appendChild(msg);
      return tr;
    })));
    var ranks = {}, memory = {}, comm = {}, all = {};
    (c.ranks || []).forEach(function (r) { ranks[r.rank] = r; all[r.rank] = 1; });
    (c.memory || []).forEach(function (m) { memory[m.rank] = m; all[m.rank] = 1; });
    (c.comm || []).forEach(function (k) { comm[k.rank] = k; all[k.rank] = 1; });
    var order = Object.keys(all).map(Number).sort(function (a, b) { return a - b; });
    panel.appendChild(table("ranks", ["rank", "norm", "grads", "scratch peak", "budget", "leaked", "collectives", "bytes moved", "notes"], order.map(function (rank) {
      var r = ranks[rank] || {}, m = memory[rank], k = comm[rank];
      var tr = el("tr"); tr.setAttribute("data-rank", rank);
      tr.appendChild(td(rank, "num")); tr.appendChild(td(val(r.norm), "num"));
      tr.appendChild(td(m ? bytes(m.gradBytes) : "-", "num"));
      tr.appendChild(td(m ? bytes(m.scratchPeakBytes) : "-", "num" + (m && m.scratchPeakBytes > m.budgetBytes ? " over" : "")));
      tr.appendChild(td(m ? bytes(m.budgetBytes) : "-", "num"));
      tr.appendChild(td(m ? bytes(m.leakedBytes) : "-", "num" + (m && m.leakedBytes ? " over" : "")));
      tr.appendChild(td(k ? k.collectives : "-", "num")); tr.appendChild(td(k ? bytes(k.bytes) : "-", "num"));
      var kinds = k && k.byKind ? Object.keys(k.byKind).filter(function (x) { return k.byKind[x] > 0; }).map(function (x) { return x + " " + k.byKind[x]; }).join(", ") : "";
      var notes = td(kinds); if (r.error) notes.appendChild(el("div", "st-fail", r.error)); tr.appendChild(notes);
      return tr;
    })));
    if (c.repro) panel.appendChild(reproBlock(c.repro));
    wire(panel);
  }
  function wire(root) {
    root.querySelectorAll("button.copy").forEach(function (b) {
      b.addEventListener("click", function () {
        var text = b.getAttribute("data-copy") || "";
        var done = function () { b.textContent = "copied"; setTimeout(function () { b.textContent = "copy"; }, 1200); };
        if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, function () {});
      });
    });
    root.querySelectorAll("button.close").forEach(function (b) {
      b.addEventListener("click", function () { b.closest("details").open = false; });
    });
  }
  var cells = document.querySelectorAll("details.cell");
  function closeAll(except) { cells.forEach(function (d) { if (d !== except && d.open) d.open = false; }); }
  cells.forEach(function (d) {
    d.addEventListener("toggle", function () {
      if (!d.open) return;
      var panel = d.querySelector(".detail");
      if (panel && !panel.hasChildNodes()) render(panel, data[Number(d.getAttribute("data-index"))]);
      closeAll(d);
    });
  });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") closeAll(null); });
  function openFromHash() {
    var id = decodeURIComponent(location.hash.slice(1));
    var e = id && document.getElementById(id);
    if (e && e.matches("details.cell")) { e.open = true; e.scrollIntoView({ block: "center" }); }
  }
  window.addEventListener("hashchange", openFromHash);
  openFromHash();
  // filters: a square, a listed cell or a group is shown when it matches every select
  var keys = ["subject", "check", "layout", "model", "dtype"];
  var selects = keys.map(function (k) { return document.getElementById("filter-" + k); });
  var only = document.getElementById("only-fail");
  var listed = document.querySelectorAll("#failures li.group-cell");
  var groups = document.querySelectorAll("#failures article.group");
  function matches(e, skipCheck) {
    for (var i = 0; i < keys.length; i++) {
      var want = selects[i] && selects[i].value;
      if (!want) continue;
      if (keys[i] === "check") { if (!skipCheck && (" " + (e.getAttribute("data-failed") || "") + " ").indexOf(" " + want + " ") < 0) return false; }
      else if (e.getAttribute("data-" + keys[i]) !== want) return false;
    }
    return true;
  }
  function apply() {
    var onlyFail = only && only.checked;
    cells.forEach(function (d) { d.hidden = !(matches(d, false) && (!onlyFail || d.classList.contains("fail"))); });
    listed.forEach(function (li) { li.hidden = !matches(li, true); });
    var check = selects[1] && selects[1].value;
    groups.forEach(function (g) {
      var shown = g.querySelectorAll("li.group-cell:not([hidden])").length;
      var out = (check && g.getAttribute("data-check") !== check) || shown === 0;
      g.hidden = out;
      var n = g.querySelector(".shown");
      if (n) n.textContent = shown === Number(g.getAttribute("data-cells")) ? "" : " (" + shown + " shown)";
    });
  }
  selects.concat([only]).forEach(function (s) { if (s) s.addEventListener("change", apply); });
  wire(document.getElementById("failures"));
  document.body.setAttribute("data-ready", "true");
})();
`;

/**
 * JSON that can sit inside a <script> element: no "</script>", no "<!--", and no raw control or bidi
 * character (JSON.stringify escapes C0 only); every one written as a \u escape, so the data is unchanged.
 */
function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/[<\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function cellAnchor(index: number): string {
  return `cell-${index}`;
}

function reproBlock(repro: string): string {
  if (!repro) return "";
  return `<div class="repro"><code class="repro-command">${h(repro)}</code><button type="button" class="copy" data-copy="${h(repro)}">copy</button></div>`;
}

/** What the filters match on, as attributes of a grid square or a listed cell. */
function filterAttrs(c: CellJson): string {
  return `data-subject="${h(c.subject)}" data-layout="${h(layoutOf(c))}" data-model="${h(c.model)}" data-dtype="${h(c.dtype)}" data-failed="${h(failedChecks(c).map((x) => x.id).join(" "))}"`;
}

function select(key: string, values: Iterable<string>): string {
  const options = [...new Set(values)].map((v) => `<option value="${h(v)}">${h(v)}</option>`).join("");
  return `<label>${h(key)} <select id="filter-${key}"><option value="">all</option>${options}</select></label>`;
}

function filtersBar(cells: readonly CellJson[], grid: Grid): string {
  return (
    `<form id="filters" onsubmit="return false">` +
    select("subject", grid.subjects) +
    select("check", cells.flatMap((c) => failedChecks(c).map((x) => x.id)).sort()) +
    select("layout", grid.layouts) +
    select("model", cells.map((c) => c.model)) +
    select("dtype", cells.map((c) => c.dtype)) +
    `<label><input type="checkbox" id="only-fail"> only failing cells</label></form>`
  );
}

function groupArticle(g: FailureGroup, index: Map<CellJson, number>): string {
  const first = g.cells[0]!;
  const messages =
    g.messages.length > 1
      ? `<details class="messages"><summary>${g.messages.length} distinct messages (beyond numbers)</summary>${g.messages.map((m) => `<pre>${h(m)}</pre>`).join("")}</details>`
      : "";
  const list = g.cells.map((c) => `<li class="group-cell" ${filterAttrs(c)}><a href="#${cellAnchor(index.get(c)!)}">${h(c.id)}</a></li>`).join("");
  return (
    `<article class="group" data-subject="${h(g.subject)}" data-check="${h(g.check)}" data-kind="${g.kind}" data-cells="${g.cells.length}">` +
    `<h4>${h(g.subject)} · <code class="check">${h(g.check)}</code> <span class="count">${g.cells.length} cell${g.cells.length === 1 ? "" : "s"}<span class="shown"></span></span><span class="kind">${h(groupKindText(g))}</span></h4>` +
    `<p class="first">first: <a class="first-cell" href="#${cellAnchor(index.get(first)!)}">${h(first.id)}</a></p><pre class="first-message">${h(g.firstMessage)}</pre>` +
    reproBlock(first.repro) +
    messages +
    `<details class="group-cells"><summary>every cell (${g.cells.length})</summary><ul class="cells">${list}</ul></details></article>`
  );
}

function failuresSection(digest: FailureDigest, index: Map<CellJson, number>): string {
  const parts: string[] = [];
  parts.push(`<div id="unexpected"><h3>${h(unexpectedHeading(digest))}</h3>`);
  for (const m of digest.missed) parts.push(`<p class="missed">missed: ${h(missedText(m))}</p>`);
  parts.push(digest.unexpected.length ? digest.unexpected.map((g) => groupArticle(g, index)).join("\n") : `<p class="none">None.</p>`, `</div>`);
  if (digest.expected.length) {
    parts.push(`<div id="expected"><h3>${h(expectedHeading(digest))}</h3>`);
    parts.push(`<p class="note">A known-bad subject declares the checks that must catch it (catchBy); its other failing checks are listed as "also failed".</p>`);
    parts.push(digest.expected.map((g) => groupArticle(g, index)).join("\n"), `</div>`);
  }
  return parts.join("\n");
}

function gridTable(grid: Grid, index: Map<CellJson, number>): string {
  const head = `<tr><th class="corner">subject \\ layout</th>${grid.layouts.map((l) => `<th class="layout" data-layout="${h(l)}">${h(l)}</th>`).join("")}</tr>`;
  const rows = grid.subjects
    .map((subject) => {
      const row = grid.cells.get(subject)!;
      const tds = grid.layouts
        .map((layout) => {
          const list = row.get(layout) ?? [];
          const squares = list
            .map((c) => {
              const o = outcomeOf(c);
              const i = index.get(c)!;
              return `<details class="cell ${o}" id="${cellAnchor(i)}" data-index="${i}" data-cell-id="${h(c.id)}" ${filterAttrs(c)}><summary title="${h(`${c.id}: ${o}`)}" aria-label="${h(`${c.id}: ${o}`)}"></summary><div class="detail"></div></details>`;
            })
            .join("");
          return `<td data-layout="${h(layout)}">${squares}</td>`;
        })
        .join("");
      return `<tr data-subject="${h(subject)}"><th scope="row">${h(subject)}</th>${tds}</tr>`;
    })
    .join("\n");
  return `<table id="grid"><thead>${head}</thead><tbody>\n${rows}\n</tbody></table>`;
}

interface Bar {
  rank: number;
  value: number;
  limit?: number;
  label: string;
}

/**
 * Small multiples: one row per subject, one group per layout (the grid's columns), one bar per rank:
 * the largest value of that rank over the cells of that subject and layout, with its limit as a tick.
 */
function chart(
  id: string,
  grid: Grid,
  bars: (cells: CellJson[], subject: string, layout: string) => Bar[],
  scale: "log-bytes" | "log-count",
  caption: string,
): string {
  const barW = 6;
  const gap = 14;
  const left = 150;
  const top = 10;
  const rowH = 110;
  const plotH = 80;
  const groups = new Map<string, number>(); // layout -> width (most ranks over subjects)
  const data = grid.subjects.map((subject) =>
    grid.layouts.map((layout) => {
      const list = grid.cells.get(subject)!.get(layout) ?? [];
      const b = list.length ? bars(list, subject, layout) : [];
      groups.set(layout, Math.max(groups.get(layout) ?? 1, b.length));
      return b;
    }),
  );
  let max = 0;
  for (const row of data) for (const g of row) for (const b of g) max = Math.max(max, b.value, b.limit ?? 0);
  const logMax = Math.max(1, Math.ceil(Math.log2(Math.max(2, max)) / 10)) * 10; // whole KiB/MiB/GiB steps
  const decades = Math.max(1, Math.ceil(Math.log10(Math.max(1, max)) - 1e-9)); // counts: 0, 1, 10, 100, ...
  const y = (v: number) => {
    const f = scale === "log-bytes" ? Math.log2(Math.max(1, v)) / logMax : Math.log10(1 + Math.max(0, v)) / Math.log10(1 + 10 ** decades);
    return plotH - Math.min(1, Math.max(0, f)) * plotH;
  };
  const x0: number[] = [];
  let x = left;
  for (const layout of grid.layouts) {
    x0.push(x);
    x += groups.get(layout)! * barW + gap;
  }
  const width = x + 10;
  const height = top + grid.subjects.length * rowH + 120;
  const parts: string[] = [];
  const ticks =
    scale === "log-bytes"
      ? Array.from({ length: logMax / 10 + 1 }, (_, i) => ({ v: 2 ** (i * 10), label: `1 ${["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"][i] ?? `2^${i * 10} B`}` }))
      : [...Array.from({ length: decades + 1 }, (_, i) => ({ v: 10 ** i, label: String(10 ** i) }))];
  grid.subjects.forEach((subject, si) => {
    const oy = top + si * rowH;
    parts.push(`<g class="row" data-subject="${h(subject)}" transform="translate(0,${oy})">`);
    parts.push(`<text class="row-label" x="4" y="${plotH / 2}">${h(subject)}</text>`);
    for (const t of ticks) {
      const ty = y(t.v);
      parts.push(`<line class="axis" x1="${left - 4}" x2="${width - 10}" y1="${ty}" y2="${ty}"/><text x="${left - 6}" y="${ty + 4}" text-anchor="end">${h(t.label)}</text>`);
    }
    grid.layouts.forEach((layout, li) => {
      data[si][li].forEach((b, k) => {
        const bx = x0[li] + k * barW;
        const by = y(b.value);
        const over = b.limit !== undefined && b.value > b.limit;
        parts.push(
          `<rect class="bar${over ? " over" : ""}" data-layout="${h(layout)}" data-rank="${b.rank}" data-value="${b.value}"${b.limit !== undefined ? ` data-limit="${b.limit}"` : ""} x="${bx}" y="${by}" width="${barW - 1}" height="${Math.max(0, plotH - by)}"><title>${h(b.label)}</title></rect>`,
        );
        if (b.limit !== undefined) {
          const ly = y(b.limit);
          parts.push(`<line class="budget" data-rank="${b.rank}" x1="${bx}" x2="${bx + barW - 1}" y1="${ly}" y2="${ly}"/>`);
        }
      });
    });
    parts.push(`</g>`);
  });
  const labelsY = top + grid.subjects.length * rowH;
  grid.layouts.forEach((layout, li) => {
    const cx = x0[li] + (groups.get(layout)! * barW) / 2;
    parts.push(`<text class="col-label" transform="translate(${cx},${labelsY}) rotate(-50)" text-anchor="end">${h(layout)}</text>`);
  });
  return (
    `<svg id="${id}" xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="${h(caption)}">` +
    `<title>${h(caption)}</title>${parts.join("")}</svg>`
  );
}

function memoryBars(cells: CellJson[], subject: string, layout: string): Bar[] {
  const worst = new Map<number, { peak: number; budget: number; id: string }>();
  for (const c of cells)
    for (const m of c.memory) {
      const w = worst.get(m.rank);
      if (!w || m.scratchPeakBytes > w.peak) worst.set(m.rank, { peak: m.scratchPeakBytes, budget: m.budgetBytes, id: c.id });
    }
  return [...worst.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([rank, w]) => ({
      rank,
      value: w.peak,
      limit: w.budget,
      label: `${subject} on ${layout}, rank ${rank}: peak scratch ${formatBytes(w.peak)}, budget ${formatBytes(w.budget)}${w.peak > w.budget ? " (OVER)" : ""} (${w.id})`,
    }));
}

function commBars(cells: CellJson[], subject: string, layout: string): Bar[] {
  const worst = new Map<number, { n: number; bytes: number; id: string }>();
  for (const c of cells)
    for (const k of c.comm) {
      const w = worst.get(k.rank);
      if (!w || k.collectives > w.n) worst.set(k.rank, { n: k.collectives, bytes: k.bytes, id: c.id });
    }
  return [...worst.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([rank, w]) => ({ rank, value: w.n, label: `${subject} on ${layout}, rank ${rank}: ${w.n} collectives, ${formatBytes(w.bytes)} moved (${w.id})` }));
}

/**
 * #sections: one table per section (article.section with data-kind and data-verdict), a row per case
 * (tr.section-case with data-met); an expectation not met is marked fail, a known-bad case caught as it
 * must be is a pass that says "expected fail".
 */
function sectionsHtml(sections: readonly SectionResult[]): string {
  const articles = sections.map((s) => {
    const n = sectionCounts(s);
    const rows = s.cases
      .map(
        (c) =>
          `<tr class="section-case" data-met="${c.met}"><td class="${c.met ? "st-pass" : "st-fail"}">${c.met ? "ok" : "FAIL"}</td><td><code>${h(c.id)}</code></td><td>expected ${c.expect}</td>` +
          `<td><code>${h(c.check)}</code> ${c.status}</td><td>${c.message ? `<pre>${h(c.message)}</pre>` : ""}</td></tr>`,
      )
      .join("\n");
    return (
      `<article class="section" data-kind="${s.kind}" data-verdict="${sectionVerdict(s)}" data-cases="${n.cases}" data-unexpected="${n.unexpected}">` +
      `<h3>${h(sectionTitle(s))}</h3><p class="verdict ${sectionVerdict(s)}">${h(sectionSummaryText(s))}</p>` +
      `<table class="section-cases"><thead><tr><th></th><th>case</th><th>expectation</th><th>check</th><th>message</th></tr></thead><tbody>\n${rows}\n</tbody></table></article>`
    );
  });
  return `<section id="sections"><h2>Sections: regression, train and resume</h2>\n${articles.join("\n")}\n</section>`;
}

export function renderHtml(cells: readonly CellJson[], summary: RunSummary, meta: ReportMeta = {}): string {
  const grid = gridOf(cells);
  const index = new Map<CellJson, number>(cells.map((c, i) => [c, i]));
  const what = describeRun(meta);
  const title = `${meta.title ?? "clip-parity"}${what ? `: ${what}` : ""}`;
  const n = counts(cells);
  const verdict = runVerdict(cells, summary, meta.sections);

  const digest = failureDigest(cells, meta.catchBy);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="clip-parity">
<title>${h(title)}</title>
<style>${CSS}</style>
</head>
<body>
<header id="summary" data-verdict="${verdict}" data-cells="${summary.cells}" data-passed="${summary.passed}" data-failed="${summary.failed}" data-skipped="${summary.skipped}">
<h1>${h(title)}</h1>
<p class="verdict ${verdict}">${h(VERDICT_TEXT[verdict])}: ${h(summaryText(summary))}${verdict === "none" ? `; ${h(NOTHING_JUDGED)}` : ""}</p>
${(meta.notes ?? []).map((x) => `<p class="note">${h(x)}</p>`).join("\n")}${meta.generatedAt ? `<p class="note">generated ${h(meta.generatedAt)}</p>` : ""}
<nav><a href="#matrix">matrix</a><a href="#memory">memory per rank</a><a href="#comm">collectives per rank</a><a href="#failures">failures by subject and check (${digest.unexpected.length + digest.expected.length} groups, ${digest.failingCells} cells)</a>${meta.sections?.length ? `<a href="#sections">regression, train and resume sections</a>` : ""}</nav>
</header>
<section id="matrix"><h2>Matrix: subjects × layouts</h2>
<p class="legend"><span><i class="swatch" style="background:var(--pass)"></i>passed (${n.pass})</span><span><i class="swatch" style="background:var(--fail)"></i>failed (${n.fail})</span><span><i class="swatch" style="background:var(--skip)"></i>skipped (${n.skip})</span></p>
${filtersBar(cells, grid)}
<p class="note">One square per cell (model, dtype, norm type, regime, seed); click it for its details.</p>
<div class="grid-wrap">${gridTable(grid, index)}</div>
</section>
<section id="memory"><h2>Peak scratch per rank against its budget</h2>
<p class="note">Per subject and layout, each rank's largest scratch peak during the clip over its cells (log scale); the black tick is that cell's budget, red bars are over it.</p>
<div class="chart-wrap">${chart("memory-chart", grid, memoryBars, "log-bytes", "peak scratch per rank against its budget")}</div>
</section>
<section id="comm"><h2>Collectives per rank</h2>
<p class="note">Per subject and layout, each rank's largest number of collectives in one clip over its cells (log scale).</p>
<div class="chart-wrap">${chart("comm-chart", grid, commBars, "log-count", "collectives per rank")}</div>
</section>
<section id="failures"><h2>Failures by subject and check (${digest.failingCells} failing cells, ${digest.pairs} failing checks)</h2>
${digest.failingCells ? failuresSection(digest, index) : `<p class="none">No failing cells.</p>`}
</section>
${meta.sections?.length ? sectionsHtml(meta.sections) : ""}
<script type="application/json" id="cells-data">${scriptJson(cells)}</script>
<noscript><p class="note">Cell details and filters need JavaScript; the failure groups above are complete without it.</p></noscript>
<script>var CHECK_SEVERITY = ${scriptJson(Object.fromEntries([...PERFORMANCE_CHECKS].map((id) => [id, "performance"])))};${SCRIPT}</script>
</body>
</html>
`;
}

/**
 * `clip-parity gate --baseline FILE --results FILE [--memory-slack 5%] [--comm-slack 0%]`
 *
 * Compares tonight's results with a baseline (both the --json shape) and fails the night (exit 1) on:
 *   - a new failure: a check that passed or was skipped in the baseline and fails now (cell, check, message);
 *   - a check that passed in the baseline and is now skipped or missing from its cell (a check that no
 *     longer runs proves nothing, so it cannot keep its pass);
 *   - a cell of the baseline that is missing from the results;
 *   - a rank's scratch peak above the baseline's by more than the memory slack;
 *   - a rank's collective count above the baseline's by more than the comm slack (default 0: counts
 *     are exact, any extra collective is a regression).
 *   - nothing judged: no check ran in the cells the two files share (empty results, every check skipped,
 *     or a baseline without those cells), so "no regression" would be a verdict over nothing.
 * Prints a Markdown verdict (for $GITHUB_STEP_SUMMARY), every text from the files escaped; exit 0 with
 * "no regression" otherwise. New cells, fixed failures and improvements are listed as information.
 * Bad files: exit 2.
 */
import { InputError } from "../harness/errors.ts";
import { readResultFile, type CellJson, type ResultFile } from "../harness/results/schema.ts";
import { assertWritableFile, writeFileAtomic } from "../harness/util/fs.ts";
import { firstLine, formatBytes } from "../reports/common.ts";
import { mdCell, mdCode, mdText } from "../reports/escape.ts";
import { parseCommand, str, type CommandSpec } from "./args.ts";

export type RegressionKind = "new-failure" | "now-skipped" | "missing-check" | "disappeared" | "memory" | "collectives";

export interface Regression {
  kind: RegressionKind;
  cell: string;
  /** The check id, or "rank N". */
  where: string;
  message: string;
}

export interface GateOptions {
  /** Fraction, e.g. 0.05. */
  memorySlack: number;
  commSlack: number;
}

export interface GateResult {
  regressions: Regression[];
  /** Lines of information: new cells, fixed failures, improvements. */
  notes: string[];
  compared: number;
  /** Checks that ran (passed or failed) in the compared cells of the results: 0 is no verdict. */
  judged: number;
}

/** "5%" -> 0.05, "0.05" -> 0.05; a bare number above 1 is refused as ambiguous. */
export function parseSlack(text: string, flagName: string): number {
  const t = text.trim();
  const pct = /^(\d+(?:\.\d+)?)\s*%$/.exec(t);
  if (pct) return Number(pct[1]) / 100;
  if (/^\d+(?:\.\d+)?$/.test(t)) {
    const x = Number(t);
    if (x <= 1) return x;
    throw new InputError(`${flagName}: "${text}" is ambiguous; write a percentage such as "${t}%" or a fraction at most 1 such as 0.05`);
  }
  throw new InputError(`${flagName}: "${text}" is not a percentage (e.g. 5%) or a fraction (e.g. 0.05)`);
}

function pct(x: number): string {
  return `${Number((x * 100).toFixed(x < 0.1 ? 1 : 0))}%`;
}

function byId(file: ResultFile): Map<string, CellJson> {
  return new Map(file.cells.map((c) => [c.id, c]));
}

/** The checks of one cell: newly failing, and passing in the baseline but no longer run. */
function checkRegressions(id: string, base: CellJson, cur: CellJson): Regression[] {
  const out: Regression[] = [];
  const baseStatus = new Map(base.checks.map((c) => [c.id, c.status]));
  const now = new Set(cur.checks.map((c) => c.id));
  for (const check of cur.checks) {
    const was = baseStatus.get(check.id);
    if (check.status === "fail" && was !== "fail") {
      out.push({ kind: "new-failure", cell: id, where: check.id, message: `${was === undefined ? "new check" : `was ${was}`}, now fails: ${firstLine(check.message)}` });
    } else if (check.status === "skip" && was === "pass") {
      out.push({ kind: "now-skipped", cell: id, where: check.id, message: `was pass, now skipped${check.message ? `: ${firstLine(check.message)}` : ""}` });
    }
  }
  for (const check of base.checks) {
    if (check.status === "pass" && !now.has(check.id)) out.push({ kind: "missing-check", cell: id, where: check.id, message: "was pass, missing from the results" });
  }
  return out;
}

export function compareResults(baseline: ResultFile, results: ResultFile, options: GateOptions): GateResult {
  const regressions: Regression[] = [];
  const notes: string[] = [];
  const now = byId(results);
  const before = byId(baseline);
  let compared = 0;
  let judged = 0;
  let fixed = 0;
  let memoryDown = 0;
  for (const [id, base] of before) {
    const cur = now.get(id);
    if (!cur) {
      regressions.push({ kind: "disappeared", cell: id, where: "-", message: "in the baseline but missing from the results" });
      continue;
    }
    compared++;
    regressions.push(...checkRegressions(id, base, cur));
    judged += cur.checks.filter((c) => c.status !== "skip").length;
    if (base.checks.some((c) => c.status === "fail") && !cur.checks.some((c) => c.status === "fail")) fixed++;

    const baseMem = new Map(base.memory.map((m) => [m.rank, m]));
    for (const m of cur.memory) {
      const b = baseMem.get(m.rank);
      if (!b) continue;
      const allowed = b.scratchPeakBytes * (1 + options.memorySlack);
      if (m.scratchPeakBytes > allowed) {
        const growth = b.scratchPeakBytes > 0 ? ` (+${pct(m.scratchPeakBytes / b.scratchPeakBytes - 1)})` : "";
        regressions.push({
          kind: "memory",
          cell: id,
          where: `rank ${m.rank}`,
          message: `scratch peak ${formatBytes(m.scratchPeakBytes)} (${m.scratchPeakBytes} B) > baseline ${formatBytes(b.scratchPeakBytes)} (${b.scratchPeakBytes} B) + ${pct(options.memorySlack)} slack${growth}`,
        });
      } else if (m.scratchPeakBytes < b.scratchPeakBytes) memoryDown++;
    }
    const baseComm = new Map(base.comm.map((c) => [c.rank, c]));
    for (const c of cur.comm) {
      const b = baseComm.get(c.rank);
      if (!b) continue;
      if (c.collectives > b.collectives * (1 + options.commSlack)) {
        regressions.push({
          kind: "collectives",
          cell: id,
          where: `rank ${c.rank}`,
          message: `${c.collectives} collectives > baseline ${b.collectives}${options.commSlack ? ` + ${pct(options.commSlack)} slack` : ""} (+${c.collectives - b.collectives})`,
        });
      }
    }
  }
  const added = [...now.keys()].filter((id) => !before.has(id));
  if (added.length) notes.push(`${added.length} cell${added.length === 1 ? "" : "s"} not in the baseline (not gated): ${added.slice(0, 5).join(", ")}${added.length > 5 ? ", ..." : ""}`);
  if (fixed) notes.push(`${fixed} cell${fixed === 1 ? "" : "s"} failing in the baseline now pass${fixed === 1 ? "es" : ""}`);
  if (memoryDown) notes.push(`${memoryDown} rank scratch peak${memoryDown === 1 ? "" : "s"} below the baseline (consider refreshing it)`);
  const backends = (f: ResultFile) => [...new Set(f.cells.map((c) => c.backend).filter(Boolean))].join(",");
  if (backends(baseline) && backends(results) && backends(baseline) !== backends(results)) {
    notes.push(`the baseline ran on ${backends(baseline)}, the results on ${backends(results)}`);
  }
  return { regressions, notes, compared, judged };
}

const KIND_TITLE: Record<RegressionKind, string> = {
  "new-failure": "new failure",
  "now-skipped": "check now skipped",
  "missing-check": "check missing",
  disappeared: "disappeared cell",
  memory: "scratch peak above baseline",
  collectives: "collectives above baseline",
};

/** A gate fails on a regression, and on a comparison in which no check ran: that is no verdict at all. */
export function gateFailed(r: GateResult): boolean {
  return r.regressions.length > 0 || r.judged === 0;
}

function headline(r: GateResult): string {
  const n = r.regressions.length;
  if (r.judged === 0) return `## clip-parity gate: ⛔ NO VERDICT: nothing was judged${n ? ` (and ${n} regression${n === 1 ? "" : "s"})` : ""}`;
  return n ? `## clip-parity gate: ❌ ${n} regression${n === 1 ? "" : "s"}` : `## clip-parity gate: ✅ no regression`;
}

/** Why nothing was judged, in the words of the files. */
function nothingJudged(r: GateResult, baselinePath: string, resultsPath: string): string {
  const where = r.compared === 0 ? `no cell of ${mdCode(resultsPath)} is in ${mdCode(baselinePath)}` : `no check ran in the ${r.compared} cells both files hold (every check skipped, or none)`;
  return `Nothing was judged: ${where}; a comparison of nothing cannot pass the gate.`;
}

export function renderVerdict(r: GateResult, baselinePath: string, resultsPath: string, options: GateOptions, maxRows = 200): string {
  const out: string[] = [headline(r), ""];
  const slack = `(memory slack ${pct(options.memorySlack)}, comm slack ${pct(options.commSlack)})`;
  const comparedText = `${r.compared} cells of ${mdCode(baselinePath)} compared with ${mdCode(resultsPath)} ${slack}.`;
  if (r.judged === 0) out.push(nothingJudged(r, baselinePath, resultsPath), "");
  if (r.regressions.length === 0) {
    out.push(comparedText, "");
  } else {
    const kinds = new Map<RegressionKind, number>();
    for (const x of r.regressions) kinds.set(x.kind, (kinds.get(x.kind) ?? 0) + 1);
    out.push(`${[...kinds].map(([k, n]) => `${n} ${KIND_TITLE[k]}${n === 1 ? "" : "s"}`).join(", ")}; ${comparedText}`, "");
    out.push(`| regression | cell | check / rank | what |`, `|---|---|---|---|`);
    for (const x of r.regressions.slice(0, maxRows)) out.push(`| ${KIND_TITLE[x.kind]} | ${mdCode(x.cell, { table: true })} | ${mdCell(x.where)} | ${mdCell(x.message)} |`);
    if (r.regressions.length > maxRows) out.push("", `… and ${r.regressions.length - maxRows} more.`);
    out.push("");
  }
  for (const n of r.notes) out.push(`- ${mdText(n)}`);
  if (r.notes.length) out.push("");
  return out.join("\n");
}

export const spec: CommandSpec = {
  name: "gate",
  summary: "Compares tonight's results with a baseline (both the --json shape) and fails on any regression.",
  flags: {
    baseline: { type: "string", value: "FILE", description: "the baseline result file", required: true },
    results: { type: "string", value: "FILE", description: "this run's result file", required: true },
    "memory-slack": { type: "string", value: "PCT", description: "allowed scratch growth, e.g. 5% or 0.05", default: "5%" },
    "comm-slack": { type: "string", value: "PCT", description: "allowed growth of collective counts", default: "0%" },
    md: { type: "string", value: "FILE", description: "also write the Markdown verdict here ($GITHUB_STEP_SUMMARY)" },
  },
  notes: "exit status: 0 no regression, 1 a regression or nothing judged (no check ran), 2 bad input",
};

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const baselinePath = str(v, "baseline")!;
  const resultsPath = str(v, "results")!;
  const options: GateOptions = {
    memorySlack: parseSlack(str(v, "memory-slack") ?? "5%", "--memory-slack"),
    commSlack: parseSlack(str(v, "comm-slack") ?? "0%", "--comm-slack"),
  };
  const md = str(v, "md");
  if (md !== undefined) assertWritableFile(md, "--md");
  const baseline = readResultFile(baselinePath);
  const results = readResultFile(resultsPath);
  const verdict = compareResults(baseline, results, options);
  const text = renderVerdict(verdict, baselinePath, resultsPath, options);
  process.stdout.write(text);
  if (md) writeFileAtomic(md, text);
  return gateFailed(verdict) ? 1 : 0;
}

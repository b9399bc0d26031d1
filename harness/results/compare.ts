/**
 * Tonight's results against a baseline (both the --json shape): the regressions a nightly gate fails on
 * (a new failure, a check now skipped or missing, a disappeared cell, a scratch peak or a collective count
 * above the baseline's by more than its slack) and the notes it only reports. `clip-parity gate` prints it.
 */
import type { CellJson, ResultFile } from "./schema.ts";
import { firstLine, formatBytes } from "./text.ts";
import { sectionVerdict } from "./sections.ts";

export type RegressionKind = "new-failure" | "now-skipped" | "missing-check" | "disappeared" | "memory" | "collectives";

export interface Regression {
  kind: RegressionKind;
  cell: string;
  /** The check id, or "rank N". */
  where: string;
  message: string;
}

/** The slacks a gate allows unless told otherwise: 5% more scratch, no extra collective (counts are exact). */
export const DEFAULT_SLACK = { memory: "5%", comm: "0%" } as const;

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
  /**
   * The results' own state, which a comparison alone does not show: cells failing now (a failure the
   * baseline shares is no regression, but still a failure) outside the known-bad subjects of its catchBy,
   * and sections with an expectation not met.
   */
  failingCells: number;
  failingSections: number;
}


/** 0.05 -> "5%". */
export function pct(x: number): string {
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
  const knownBad = new Set(Object.keys(results.catchBy ?? {}));
  const failingCells = results.cells.filter((c) => !knownBad.has(c.subject) && c.checks.some((x) => x.status === "fail")).length;
  const failingSections = (results.sections ?? []).filter((s) => sectionVerdict(s) === "fail").length;
  return { regressions, notes, compared, judged, failingCells, failingSections };
}

/** A gate fails on a regression, and on a comparison in which no check ran: that is no verdict at all. */
export function gateFailed(r: GateResult): boolean {
  return r.regressions.length > 0 || r.judged === 0;
}

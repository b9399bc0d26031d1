/**
 * `clip-parity history [--row ID|FILE]...`: runs history rows (adapters/torch/history/, harness/external/torch/history.ts),
 * each row's buggy and fixed release on its cells, then its exported script on both, and prints per row whether the
 * harness caught the shipped bug. Exit status: 0 every row caught, 1 a row was not, 2 bad input.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { InputError } from "../harness/errors.ts";
import { loadHistoryRows, resolveHistoryRow, runHistoryRow, type CellRunner, type HistoryRow, type RowOutcome, type SubjectLoader } from "../harness/external/torch/history.ts";
import { closeTorchSessions, isTorchSubject } from "../harness/external/torch/subject.ts";
import { runMatrix } from "../harness/run/runner.ts";
import { loadSubject } from "../harness/registry/registry.ts";
import type { Cell } from "../harness/cell/cell.ts";
import { assertWritableDir, assertWritableFile, writeOutputFile } from "../harness/util/fs.ts";
import { list, parseCommand, parseInteger, str, type CommandSpec } from "./args.ts";

export const spec: CommandSpec = {
  name: "history",
  summary: "Runs history rows (shipped clipping bugs): the buggy release must fail the row's check, the fixed one pass, the exported script agree.",
  flags: {
    row: { type: "string", multiple: true, value: "ID|FILE", description: "a row of adapters/torch/history/ by id, or a row file (default: every row)" },
    ci: { type: "boolean", description: "only the rows marked ci (their releases install over the pinned torch)" },
    scripts: { type: "string", value: "DIR", description: "keep the exported scripts here (default: a temporary folder, removed)" },
    "no-scripts": { type: "boolean", description: "judge the releases only; do not export and run the scripts" },
    json: { type: "string", value: "FILE", description: "write every row's outcome as JSON" },
    "timeout-s": { type: "string", value: "S", description: "wall-clock limit of one cell, the session start included", default: "600" },
  },
  notes: "exit status: 0 every row caught (buggy fails its check, fixed passes), 1 a row was not, 2 bad input",
};

/** The subject loader and cell runner the history rows use: the library's own, one cell list per release. */
export function historyRunners(timeoutMs: number): { load: SubjectLoader; run: CellRunner } {
  const load: SubjectLoader = async (s) => {
    const subject = await loadSubject(s);
    if (!isTorchSubject(subject)) throw new InputError(`${s}: a history row runs torch: subjects`);
    return subject;
  };
  const run: CellRunner = async (cells: Cell[]) => {
    const out = await runMatrix(
      { name: "history", description: "a history row's cells on one release", backend: "cpu", cases: cells.map(({ subject: _, ...c }) => c), subjects: [cells[0]!.subject] },
      { golden: "off", timeoutMs },
    );
    await closeTorchSessions();
    return out.results;
  };
  return { load, run };
}

export function outcomeLine(row: HistoryRow, o: RowOutcome): string {
  const cells = `${row.cells.length} cell${row.cells.length === 1 ? "" : "s"}`;
  if (!o.caught) return `NOT CAUGHT ${row.id}: ${o.why}`;
  const script = o.script ? `; its script reproduces on ${row.buggy.pins[0]}, not on ${row.fixed.pins[0]}` : "";
  return `CAUGHT ${row.id}: ${row.buggy.pins[0]} fails ${row.check} on ${cells}, ${row.fixed.pins[0]} passes them${script}`;
}

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const refs = list(v, "row");
  let rows = refs ? refs.map(resolveHistoryRow) : loadHistoryRows();
  if (v.ci) rows = rows.filter((r) => r.ci);
  if (!rows.length) throw new InputError(`history: no rows to run${v.ci ? " (none is marked ci)" : ""}`);
  const jsonPath = str(v, "json");
  if (jsonPath !== undefined) assertWritableFile(jsonPath, "--json");
  const keep = str(v, "scripts");
  if (keep !== undefined) assertWritableDir(keep, "--scripts");
  const timeoutMs = parseInteger(str(v, "timeout-s")!, "--timeout-s", { min: 1, max: 86_400 }) * 1000;
  const scriptsDir = v["no-scripts"] ? undefined : (keep ?? mkdtempSync(join(tmpdir(), "clip-parity-history-")));
  const { load, run: runCells } = historyRunners(timeoutMs);
  const outcomes: RowOutcome[] = [];
  try {
    for (const row of rows) {
      const o = await runHistoryRow(row, load, runCells, scriptsDir, (line) => process.stderr.write(`history: ${line}\n`));
      outcomes.push(o);
      process.stdout.write(`${outcomeLine(row, o)}\n`);
    }
  } finally {
    if (scriptsDir && keep === undefined) rmSync(scriptsDir, { recursive: true, force: true });
  }
  const caught = outcomes.filter((o) => o.caught).length;
  process.stdout.write(`history: ${caught} of ${outcomes.length} rows caught\n`);
  if (jsonPath) writeOutputFile(jsonPath, JSON.stringify(outcomes, null, 2) + "\n");
  return caught === outcomes.length ? 0 : 1;
}

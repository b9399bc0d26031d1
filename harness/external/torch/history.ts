/**
 * History rows (SPEC §11): a clipping bug that shipped in a framework release and was fixed in a later one, as
 * data (`adapters/torch/history/<id>.json`): the record, the buggy and the fixed release, the entry point as users
 * call it, the cells that trigger it and the check that must fail. A row is *caught* when, on the final code, the
 * buggy release fails that check on every one of its cells, the fixed release passes every check on them, and the
 * exported standalone script of the first cell reproduces on the buggy release and not on the fixed one. Rows are
 * run by `clip-parity history` and written up by `npm run history` (docs/history.{json,md}).
 */
import { existsSync, readdirSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { z } from "zod";
import { InputError } from "../../errors.ts";
import { worldSize } from "../../layout/layout.ts";
import type { CellResult } from "../../results/types.ts";
import { reproCommand, type Cell } from "../../cell/cell.ts";
import { readJsonFile } from "../../util/json-file.ts";
import { parsePin, releaseEnvironment, withPins } from "./environments.ts";
import { exportCell, parseCellId } from "./export.ts";
import { ADAPTER_DIR } from "./options.ts";
import { runExportedScript, sameFindings } from "./repro-run.ts";
import type { TorchSubject } from "./subject.ts";

export const HISTORY_DIR = join(ADAPTER_DIR, "history");

const pinText = z.string().superRefine((t, ctx) => {
  try {
    parsePin(t, "pin");
  } catch (err) {
    ctx.addIssue({ code: "custom", message: (err as Error).message });
  }
});

const releaseSchema = z
  .object({
    /** The pins of this side: the framework's release first, then what it needs (its torch, a kernels package). */
    pins: z.array(pinText).min(1),
    /** Why these pins (the torch a release needs, read from its metadata), when more than the release itself. */
    why: z.string().optional(),
  })
  .strict();

export const historyRowSchema = z
  .object({
    $comment: z.string().optional(),
    /** The file's name without .json. */
    id: z.string().regex(/^[a-z0-9][a-z0-9-]*$/),
    /** The torch: subject the row runs, without pins: torch:<framework> or torch:<module>:<function>. */
    subject: z.string().regex(/^torch:[^@]+$/),
    /** The framework as its users name it (the page's column). */
    framework: z.string().min(1),
    title: z.string().min(1),
    /** What goes wrong, in the framework's own terms: the code before and after the fix. */
    bug: z.string().min(1),
    record: z
      .object({
        issues: z.array(z.string().url()),
        fixes: z.array(z.string().url()).min(1),
      })
      .strict(),
    buggy: releaseSchema,
    fixed: releaseSchema,
    /** How the boundary was verified from the releases' own code. */
    verified: z.string().min(1),
    /** The entry point as users call it (a function, or a trainer path such as deepspeed.initialize + engine.step). */
    entry: z.string().min(1),
    /** Cell ids without the subject (as `run` prints them after `subject/`): every one triggers the bug. */
    cells: z.array(z.string()).min(1),
    /** The check that must fail on the buggy release. */
    check: z.string().min(1),
    /** Run in CI (its releases install over the pinned torch in seconds). */
    ci: z.boolean().default(false),
  })
  .strict();

export type HistoryRow = z.infer<typeof historyRowSchema>;

/** The rows in adapters/torch/history/ (or `dir`), by id; InputError naming the file and field on a bad one. */
export function loadHistoryRows(dir = HISTORY_DIR): HistoryRow[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith(".json"))
    .sort()
    .map((f) => loadHistoryRow(join(dir, f)));
}

export function loadHistoryRow(file: string): HistoryRow {
  const parsed = { data: readJsonFile(historyRowSchema, file, `history row ${file}`) };
  if (parsed.data.id !== basename(file, ".json")) throw new InputError(`history row ${file}: field id: "${parsed.data.id}" is not the file's name (${basename(file, ".json")})`);
  for (const id of parsed.data.cells) cellOf(parsed.data, id, file);
  return parsed.data;
}

/** `--row ID|FILE`: a row of adapters/torch/history/ by id, or a file. */
export function resolveHistoryRow(ref: string): HistoryRow {
  if (ref.endsWith(".json") || ref.includes("/")) {
    const file = resolve(ref);
    if (!existsSync(file)) throw new InputError(`--row: no file ${file}`);
    return loadHistoryRow(file);
  }
  const rows = loadHistoryRows();
  const row = rows.find((r) => r.id === ref);
  if (!row) throw new InputError(`--row: no history row "${ref}" (rows: ${rows.map((r) => r.id).join(", ")})`);
  return row;
}

export const sideSubject = (row: HistoryRow, side: "buggy" | "fixed") => withPins(row.subject, row[side].pins.map((p) => parsePin(p, `${row.id}.${side}.pins`)));

function cellOf(row: HistoryRow, id: string, where = row.id): Cell {
  try {
    return parseCellId(`${row.subject}/${id}`);
  } catch (err) {
    throw new InputError(`history row ${where}: field cells: ${(err as Error).message}`);
  }
}

export const rowCells = (row: HistoryRow, side: "buggy" | "fixed"): Cell[] => row.cells.map((id) => ({ ...cellOf(row, id), subject: sideSubject(row, side) }));

/** What one release did on the row's cells. */
export interface SideOutcome {
  pins: string[];
  /** The framework's version and torch's, as the environment imports them. */
  versions: Record<string, string>;
  /** Not run: why (the environment could not be built, the release does not import). */
  notRun?: string;
  cells: { id: string; status: "pass" | "fail" | "skip"; failed: string[]; message?: string }[];
}

export interface ScriptOutcome {
  /** The exported script, relative to the page's folder. */
  path: string;
  lines: number;
  /** Index 0 buggy, 1 fixed: whether it reported the finding (REPRODUCED with the row's check). */
  reproduced: [boolean, boolean];
  failed: [string[], string[]];
}

export interface RowOutcome {
  id: string;
  buggy: SideOutcome;
  fixed: SideOutcome;
  script?: ScriptOutcome;
  /** Caught: the buggy release fails the check on every cell, the fixed one passes them all, the script agrees. */
  caught: boolean;
  /** Why not, in a line, when not caught. */
  why?: string;
}

export type CellRunner = (cells: Cell[]) => Promise<CellResult[]>;
export type SubjectLoader = (spec: string) => Promise<TorchSubject>;

function sideOf(row: HistoryRow, side: "buggy" | "fixed", results: CellResult[] | null, subject: TorchSubject | null, notRun?: string): SideOutcome {
  const versions = subject ? { ...(subject.release?.record.versions ?? {}), torch: subject.info.torch, ...(subject.info.packageVersion && subject.framework ? { [subject.framework.package]: subject.info.packageVersion } : {}) } : {};
  return {
    pins: row[side].pins,
    versions,
    ...(notRun ? { notRun } : {}),
    cells: (results ?? []).map((r) => {
      const failed = r.checks.filter((c) => c.status === "fail");
      const status = failed.length ? "fail" : r.checks.some((c) => c.status === "pass") ? "pass" : "skip";
      const main = failed.find((c) => c.id === row.check) ?? failed[0];
      return { id: r.id.slice(r.id.indexOf("/", r.cell.subject.length) + 1), status, failed: failed.map((c) => c.id), ...(main ? { message: `${main.id}: ${main.message.split("\n")[0]}` } : {}) };
    }),
  };
}

/**
 * Runs one row: both releases on its cells, then the exported script of the buggy release's first failing cell
 * against both (written to `scriptsDir` as <id>.py, when given).
 */
export async function runHistoryRow(row: HistoryRow, load: SubjectLoader, run: CellRunner, scriptsDir?: string, log: (line: string) => void = () => {}): Promise<RowOutcome> {
  const sides = {} as Sides;
  for (const side of ["buggy", "fixed"] as const) {
    const spec = sideSubject(row, side);
    log(`${row.id}: ${side} ${row[side].pins.join(" ")}`);
    let subject: TorchSubject | null = null;
    try {
      subject = await load(spec);
    } catch (err) {
      sides[side] = { outcome: sideOf(row, side, null, null, (err as Error).message.split("\n")[0]), results: [], subject: null };
      continue;
    }
    const results = await run(rowCells(row, side));
    sides[side] = { outcome: sideOf(row, side, results, subject), results, subject };
  }
  try {
    return await judgeRow(row, sides, scriptsDir, log);
  } finally {
    for (const side of Object.values(sides)) if (side.subject?.release) releaseEnvironment(side.subject.release.dir);
  }
}

type Sides = Record<"buggy" | "fixed", { outcome: SideOutcome; results: CellResult[]; subject: TorchSubject | null }>;

/** The row's verdict from both sides' cells, then its exported script on both releases. */
async function judgeRow(row: HistoryRow, sides: Sides, scriptsDir: string | undefined, log: (line: string) => void): Promise<RowOutcome> {
  const out: RowOutcome = { id: row.id, buggy: sides.buggy.outcome, fixed: sides.fixed.outcome, caught: false };
  const notRun = (["buggy", "fixed"] as const).find((s) => sides[s].outcome.notRun);
  if (notRun) return { ...out, why: `the ${notRun} release did not run: ${sides[notRun].outcome.notRun}` };
  const missed = sides.buggy.outcome.cells.find((c) => !c.failed.includes(row.check));
  if (missed) return { ...out, why: `the buggy release did not fail ${row.check} on ${missed.id} (${missed.status}${missed.failed.length ? `: ${missed.failed.join(", ")}` : ""})` };
  const wrong = sides.fixed.outcome.cells.find((c) => c.status !== "pass");
  if (wrong) return { ...out, why: `the fixed release did not pass ${wrong.id} (${wrong.status}${wrong.failed.length ? `: ${wrong.failed.join(", ")}` : ""})` };
  if (!scriptsDir) return { ...out, caught: true };
  const seen = sides.buggy.results[0]!;
  const { path, data } = await exportCell({ cell: seen.cell, outDir: scriptsDir, run: false, seen });
  const ran = [];
  for (const side of ["buggy", "fixed"] as const) {
    const s = sides[side].subject!;
    log(`${row.id}: the exported script on the ${side} release`);
    ran.push(await runExportedScript(path, worldSize(seen.cell.layout), s.options.python, 600_000, { ...s.options.env }));
  }
  const script: ScriptOutcome = {
    path: basename(path),
    lines: data.script.split("\n").length - 1,
    reproduced: [ran[0]!.reproduced && sameFindings([row.check], ran[0]!.failed), ran[1]!.reproduced],
    failed: [ran[0]!.failed, ran[1]!.failed],
  };
  const scriptWhy = !script.reproduced[0]
    ? `the exported script did not reproduce ${row.check} on the buggy release (${ran[0]!.exitCode}: ${ran[0]!.failed.join(", ") || lastLine(ran[0]!.stderr || ran[0]!.stdout)})`
    : script.reproduced[1]
      ? `the exported script reproduced on the fixed release too (${ran[1]!.failed.join(", ")})`
      : undefined;
  return { ...out, script, caught: !scriptWhy, ...(scriptWhy ? { why: scriptWhy } : {}) };
}

const lastLine = (text: string) => text.trim().split("\n").pop() ?? "";

/** The command line that reruns a row's cell on one release (the cell's own reproduce line, its subject pinned). */
export const rerunLine = (row: HistoryRow, side: "buggy" | "fixed", id: string): string => reproCommand({ ...cellOf(row, id), subject: sideSubject(row, side) }, "cpu");

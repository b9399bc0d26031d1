/**
 * Commands that work from result files (the --json shape) rather than running cells:
 *
 *   clip-parity merge --out FILE FILE...
 *     Merges shards into one file: cells in the order of the files, a cell present in several files
 *     kept once when it is the same (timing aside) and refused (exit 2) when it differs; the summary
 *     is recomputed from the cells. (A cell a matrix lists twice stays twice, as in its own file.)
 *
 *   clip-parity report --results FILE [--report json,junit,md,html] [--out DIR] [--title TEXT]
 *     Renders reports from a file (e.g. the merged nightly results). Exit 0 once written.
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { InputError } from "../errors.ts";
import { parseReporters, REPORTER_NAMES, writeAtomic, writeReports, DEFAULT_OUT_DIR } from "../../reports/index.ts";
import { cellDifference, formatResultFile, readResultFile, summarizeJson, type CellJson, type ResultFile } from "../../reports/schema.ts";
import { summaryText } from "../../reports/common.ts";

export type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** parseArgs, strict, with errors as InputError (exit 2) that name the command. */
export function parseFlags(
  command: string,
  args: string[],
  options: ParseArgsConfig["options"],
  usage: string,
  positionals = false,
): { values: Values; positionals: string[] } {
  try {
    const r = parseArgs({ args, options, allowPositionals: positionals, strict: true });
    return { values: r.values as Values, positionals: r.positionals };
  } catch (err) {
    throw new InputError(`${command}: ${(err as Error).message}\nusage: ${usage}`);
  }
}

export function flag(v: Values, name: string, command: string, required = false): string | undefined {
  const x = v[name];
  if (x === undefined || typeof x === "boolean") {
    if (required) throw new InputError(`${command}: --${name} is required`);
    return undefined;
  }
  return String(x);
}

export interface MergeInput {
  path: string;
  data: ResultFile;
}

export function mergeResults(inputs: readonly MergeInput[]): { file: ResultFile; duplicates: number } {
  const cells: CellJson[] = [];
  const from = new Map<string, { cell: CellJson; path: string }>();
  let duplicates = 0;
  for (const { path, data } of inputs) {
    for (const cell of data.cells) {
      const seen = from.get(cell.id);
      if (seen && seen.path === path) {
        cells.push(cell); // listed twice by the matrix itself: kept as the run had it (validated equal)
        continue;
      }
      if (seen) {
        const diff = cellDifference(seen.cell, cell);
        if (diff) throw new InputError(`merge: cell ${cell.id} is in ${seen.path} and in ${path} with different content (${diff})`);
        duplicates++;
        continue;
      }
      from.set(cell.id, { cell, path });
      cells.push(cell);
    }
  }
  return { file: { cells, summary: { ...summarizeJson(cells) } as ResultFile["summary"] }, duplicates };
}

const MERGE_USAGE = "clip-parity merge --out FILE FILE...";

export async function cmdMerge(args: string[]): Promise<number> {
  const { values, positionals } = parseFlags("merge", args, { out: { type: "string" } }, MERGE_USAGE, true);
  const out = flag(values, "out", "merge", true)!;
  if (positionals.length === 0) throw new InputError(`merge: no result files given\nusage: ${MERGE_USAGE}`);
  const inputs = positionals.map((path) => ({ path, data: readResultFile(path) }));
  const { file, duplicates } = mergeResults(inputs);
  writeAtomic(out, formatResultFile(file));
  process.stdout.write(
    `merged ${inputs.length} file${inputs.length === 1 ? "" : "s"} into ${out}: ${summaryText(file.summary)}` +
      (duplicates ? ` (${duplicates} identical duplicate${duplicates === 1 ? "" : "s"} kept once)` : "") +
      "\n",
  );
  return 0;
}

const REPORT_USAGE = `clip-parity report --results FILE [--report ${REPORTER_NAMES.join(",")}] [--out DIR] [--title TEXT]`;

export async function cmdReport(args: string[]): Promise<number> {
  const { values } = parseFlags(
    "report",
    args,
    { results: { type: "string" }, report: { type: "string" }, out: { type: "string" }, title: { type: "string" } },
    REPORT_USAGE,
  );
  const path = flag(values, "results", "report", true)!;
  const reporters = parseReporters(flag(values, "report", "report") ?? REPORTER_NAMES.join(","));
  const outDir = flag(values, "out", "report") ?? DEFAULT_OUT_DIR;
  const data = readResultFile(path);
  const title = flag(values, "title", "report");
  const written = await writeReports(reporters, data.cells, summarizeJson(data.cells), outDir, title ? { title } : {});
  for (const p of written) process.stdout.write(`wrote ${p}\n`);
  return 0;
}

/**
 * Merging result files (shards of one run) into one: cells in the order of the files, a cell present in
 * several files kept once when it is the same (timing aside) and refused when it differs; the summary is
 * recomputed from the cells. One shard given twice (one file twice, or two files holding the same cells)
 * is refused: it would count its cells twice or stand in for a shard that is missing. `clip-parity merge`
 * is the command over it.
 */
import { resolve } from "node:path";
import { InputError } from "../errors.ts";
import { escapeControls } from "../util/controls.ts";
import { catchByField } from "./json.ts";
import { sectionsField, type SectionResult } from "./sections.ts";
import { cellDifference, summarizeJson, type CellJson, type ResultFile } from "./schema.ts";

export interface MergeInput {
  /** As given: what messages name. */
  path: string;
  data: ResultFile;
  /** The file itself (its real path), when it differs from `path` resolved. */
  file?: string;
}

/** The cell ids of a file, in one order, as a key: two files with the same key hold the same shard. */
function cellSetKey(data: ResultFile): string {
  return JSON.stringify([...new Set(data.cells.map((c) => c.id))].sort());
}

/**
 * One shard given twice would have its cells taken as "listed twice by the matrix" (one file twice:
 * counted twice) or as agreeing duplicates (a copy: kept once, hiding the shard that is missing), so
 * both are refused. Files that overlap in part (matrices that share cells) still merge.
 */
function assertDistinctShards(inputs: readonly MergeInput[]): void {
  const byFile = new Map<string, string>();
  const byCells = new Map<string, string>();
  for (const { path, data, file } of inputs) {
    const key = file ?? resolve(path);
    const same = byFile.get(key);
    if (same !== undefined) throw new InputError(escapeControls(`merge: ${same} and ${path} are the same file; give each shard once`));
    byFile.set(key, path);
    if (data.cells.length === 0) continue; // an empty shard duplicates nothing
    const cells = cellSetKey(data);
    const twin = byCells.get(cells);
    const n = new Set(data.cells.map((c) => c.id)).size;
    if (twin !== undefined) {
      throw new InputError(escapeControls(`merge: ${twin} and ${path} hold the same ${n} cell${n === 1 ? "" : "s"} (the same shard twice?); give each shard once`));
    }
    byCells.set(cells, path);
  }
}

export function mergeResults(inputs: readonly MergeInput[]): { file: ResultFile; duplicates: number } {
  assertDistinctShards(inputs);
  const cells: CellJson[] = [];
  const from = new Map<string, { cell: CellJson; path: string }>();
  // no prototype: a subject may be named `constructor`
  const catchBy: Record<string, string[]> = Object.create(null);
  // sections run only in a whole run, so at most one shard holds them: kept as that file had them
  const sections: SectionResult[] = [];
  let duplicates = 0;
  for (const { path, data } of inputs) {
    sections.push(...((data.sections ?? []) as SectionResult[]));
    for (const [subject, checks] of Object.entries(data.catchBy ?? {})) catchBy[subject] = [...new Set([...(catchBy[subject] ?? []), ...checks])];
    for (const cell of data.cells) {
      const seen = from.get(cell.id);
      if (seen && seen.path === path) {
        cells.push(cell); // listed twice by the matrix itself: kept as the run had it (validated equal)
        continue;
      }
      if (seen) {
        const diff = cellDifference(seen.cell, cell);
        // the id and the values come from the files: escaped, as they end up on a terminal
        if (diff) throw new InputError(escapeControls(`merge: cell ${cell.id} is in ${seen.path} and in ${path} with different content (${diff})`));
        duplicates++;
        continue;
      }
      from.set(cell.id, { cell, path });
      cells.push(cell);
    }
  }
  const summary = { ...summarizeJson(cells) } as ResultFile["summary"];
  return { file: { cells, summary, ...catchByField(catchBy), ...(sectionsField(sections) as Pick<ResultFile, "sections">) }, duplicates };
}

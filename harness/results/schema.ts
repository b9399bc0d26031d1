/**
 * The `--json` result file (json.ts) as a zod schema, so that `merge`, `gate` and `report`
 * work from files written by other runs, shards or older versions. Objects are loose: fields a later
 * version adds pass through untouched (and are written back by `merge`).
 */
import { z } from "zod";
import { InputError } from "../errors.ts";
import { escapeControls } from "../util/controls.ts";
import { layoutFields } from "../layout/schema.ts";
import { cellFailed, summarize } from "./summary.ts";
import type { RunSummary } from "./types.ts";
import { SECTION_KINDS } from "./sections.ts";
import { invalidMessage, readJsonFile } from "../util/json-file.ts";

/** A norm as the JSON shape writes it: a number, or "nan" / "inf" / "-inf", or null (no value). */
const jsonNorm = z.union([z.number(), z.enum(["nan", "inf", "-inf"]), z.null()]);
const count = z.number().int().nonnegative();

export const checkJsonSchema = z.looseObject({
  id: z.string().min(1),
  status: z.enum(["pass", "fail", "skip"]),
  message: z.string(),
});

export const memoryJsonSchema = z.looseObject({
  rank: count,
  gradBytes: z.number(),
  scratchPeakBytes: z.number(),
  budgetBytes: z.number(),
  leakedBytes: z.number(),
});

export const commJsonSchema = z.looseObject({
  rank: count,
  collectives: count,
  bytes: z.number().nonnegative(),
  /** Collectives by kind (all_reduce, all_gather, broadcast, barrier); absent in older files. */
  byKind: z.record(z.string(), count).optional(),
});

export const cellJsonSchema = z.looseObject({
  id: z.string().min(1),
  subject: z.string().min(1),
  layout: z.looseObject(layoutFields),
  model: z.string(),
  dtype: z.string(),
  normType: z.union([z.number().positive(), z.literal("inf")]),
  regime: z.string(),
  seed: count,
  maxNorm: jsonNorm.optional(),
  errorIfNonfinite: z.boolean().optional(),
  backend: z.string().optional(),
  totalNorm: jsonNorm,
  referenceNorm: jsonNorm.optional(),
  clipCoef: jsonNorm.optional(),
  checks: z.array(checkJsonSchema),
  ranks: z.array(z.looseObject({ rank: count, norm: jsonNorm.optional(), error: z.string().optional() })).optional(),
  memory: z.array(memoryJsonSchema).default([]),
  comm: z.array(commJsonSchema).default([]),
  repro: z.string().default(""),
  durationMs: z.number().nonnegative().optional(),
});

export const summarySchema = z.looseObject({ cells: count, passed: count, failed: count, skipped: count });

/** subject -> the checks that must catch it, for the run's known-bad subjects; absent in older files. */
export const catchBySchema = z.record(z.string(), z.array(z.string()));

/** A section's case as json.ts writes it; its counts and verdict are recomputed from the cases, never trusted. */
export const sectionCaseJsonSchema = z.looseObject({
  id: z.string().min(1),
  expect: z.enum(["pass", "fail"]),
  check: z.string().min(1),
  status: z.enum(["pass", "fail", "skip"]),
  message: z.string(),
  met: z.boolean(),
  durationMs: z.number().nonnegative().optional(),
});

export const sectionJsonSchema = z.looseObject({
  kind: z.enum(SECTION_KINDS),
  matrix: z.string().min(1),
  subject: z.string().min(1).optional(),
  cases: z.array(sectionCaseJsonSchema),
});

export const resultFileSchema = z.looseObject({
  cells: z.array(cellJsonSchema),
  summary: summarySchema,
  catchBy: catchBySchema.optional(),
  /** The regression, train and resume sections of a whole run; absent in older files and in shards. */
  sections: z.array(sectionJsonSchema).optional(),
});

/** One cell of a result file: what every reporter, `merge` and `gate` work from. */
export type CellJson = z.infer<typeof cellJsonSchema>;
export type ResultFile = z.infer<typeof resultFileSchema>;

export function cellJsonFailed(c: Pick<CellJson, "checks">): boolean {
  return cellFailed(c);
}

/** The summary of a list of cells, counted as the runner counts it (summary.ts). */
export function summarizeJson(cells: readonly Pick<CellJson, "checks">[]): RunSummary {
  return summarize(cells);
}

/** JSON with sorted keys, for comparing cells whatever order their fields were written in. */
function canonical(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(canonical);
  if (x && typeof x === "object") {
    return Object.fromEntries(
      Object.keys(x as object)
        .sort()
        .map((k) => [k, canonical((x as Record<string, unknown>)[k])]),
    );
  }
  return x;
}

/** The first path at which two JSON values differ, with both values; null when equal. */
export function firstDifference(a: unknown, b: unknown, path = ""): string | null {
  if (JSON.stringify(canonical(a)) === JSON.stringify(canonical(b))) return null;
  if (a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    const keys = [...new Set([...Object.keys(a as object), ...Object.keys(b as object)])];
    for (const k of keys) {
      const sub = Array.isArray(a) ? `${path}[${k}]` : path ? `${path}.${k}` : k;
      const d = firstDifference((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k], sub);
      if (d) return d;
    }
  }
  const show = (v: unknown) => (v === undefined ? "absent" : JSON.stringify(v).slice(0, 120));
  return `${path || "(value)"}: ${show(a)} vs ${show(b)}`;
}

/** What differs between two runs of one cell, timing aside. */
export function cellDifference(a: CellJson, b: CellJson): string | null {
  const { durationMs: _a, timings: _ta, ...x } = a;
  const { durationMs: _b, timings: _tb, ...y } = b;
  return firstDifference(x, y);
}

/**
 * A result file as `merge` writes it: valid JSON with one cell per line, so that a committed baseline
 * stays compact and its diffs show which cells changed.
 */
export function formatResultFile(file: { cells: readonly unknown[]; summary: unknown; catchBy?: unknown; sections?: readonly unknown[] }): string {
  const cells = file.cells.map((c) => JSON.stringify(c)).join(",\n");
  const catchBy = file.catchBy === undefined ? "" : `,\n"catchBy": ${JSON.stringify(file.catchBy)}`;
  const sections = file.sections === undefined ? "" : `,\n"sections": [\n${file.sections.map((s) => JSON.stringify(s)).join(",\n")}\n]`;
  return `{"cells": [\n${cells}\n],\n"summary": ${JSON.stringify(file.summary)}${catchBy}${sections}}\n`;
}

const RESULT_FILE_KIND = "a clip-parity result file (the --json shape)";

/** Validates a parsed result file; `where` names it in the error (exit 2). */
export function parseResultFile(raw: unknown, where: string): ResultFile {
  const parsed = resultFileSchema.safeParse(raw);
  if (!parsed.success) {
    // field names come from the file: escaped, as they end up on a terminal
    throw new InputError(invalidMessage(where, RESULT_FILE_KIND, parsed.error));
  }
  return withAgreeingCells(parsed.data, where);
}

/** A matrix may list one cell twice; the same cell run twice must agree (timing aside). */
function withAgreeingCells(file: ResultFile, where: string): ResultFile {
  const seen = new Map<string, CellJson>();
  for (const c of file.cells) {
    const first = seen.get(c.id);
    const diff = first && cellDifference(first, c);
    // the id and the values come from the file: escaped, as they end up on a terminal
    if (diff) throw new InputError(escapeControls(`${where}: cell ${c.id} appears twice with different content (${diff})`));
    if (!first) seen.set(c.id, c);
  }
  return file;
}

/** Reads and validates a result file, naming the file and the problem on any error (exit 2). */
export function readResultFile(path: string): ResultFile {
  return withAgreeingCells(readJsonFile(resultFileSchema, path, path, RESULT_FILE_KIND), path);
}

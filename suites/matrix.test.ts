/**
 * The matrix suite: `npm test -- --matrix NAME [--backend B]` (default: cpu on cpu).
 * Correct subjects must pass every check of every cell; each known-bad subject must be caught by the
 * check that targets its bug on at least one cell of the matrix.
 */
import { afterAll, describe, expect, it } from "vitest";
import { cellsOf, resolveMatrix } from "../matrix/index.ts";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS } from "../harness/clip/registry.ts";
import { runCell, type CellResult } from "../harness/run/cell.ts";
import { summarize } from "../harness/run/runner.ts";
import { reportSessionFromEnv } from "../reports/index.ts";
import type { BackendKind } from "../harness/backend/backend.ts";

const matrix = resolveMatrix(process.env.CLIP_PARITY_MATRIX ?? "cpu");
const backend = (process.env.CLIP_PARITY_BACKEND ?? "cpu") as BackendKind;
// `npm test -- --report json,junit,md,html --out DIR` writes the correct subjects' cells as reports.
const reports = reportSessionFromEnv({ title: `clip-parity: matrix ${matrix.name} (npm test)`, matrix: matrix.name, backend });
const results: CellResult[] = [];
afterAll(async () => {
  if (reports && results.length) await reports.finish(results, summarize(results));
});

describe(`matrix ${matrix.name} on ${backend}: correct subjects pass every check`, () => {
  const subjects = matrix.subjects?.filter((s) => CORRECT_SUBJECTS.includes(s)) ?? CORRECT_SUBJECTS;
  for (const cell of cellsOf(matrix, subjects)) {
    const subject = BUILTIN_SUBJECTS[cell.subject];
    it(`${cell.subject} ${cell.model} ${cell.dtype} n${cell.normType} ${cell.regime} ${JSON.stringify(cell.layout)}`, async () => {
      const r = await runCell(cell, { backend, subject, budgets: matrix.budgets });
      results.push(r);
      const failures = r.checks.filter((c) => c.status === "fail").map((c) => `${c.id}: ${c.message}`);
      expect(failures).toEqual([]);
      expect(r.checks.filter((c) => c.status === "pass").length).toBeGreaterThan(0);
    });
  }
});

// The cpu and nightly matrices are built to expose every known bug (uneven shards, expert-less PP
// stages, ties across stages); a smaller matrix such as gpu4 need not contain a cell for each.
const EXPOSES_EVERY_BUG = ["cpu", "nightly"];

describe.runIf(EXPOSES_EVERY_BUG.includes(matrix.name))(`matrix ${matrix.name} on ${backend}: every known-bad subject is caught by its own check`, () => {
  for (const name of KNOWN_BAD_SUBJECTS) {
    const subject = BUILTIN_SUBJECTS[name];
    const targets = subject.catchBy ?? [];
    it(`${name} is caught by ${targets.join(" and ")}`, { timeout: 900_000 }, async () => {
      expect(targets.length).toBeGreaterThan(0);
      const missing = new Set(targets);
      const caughtAt: Record<string, string> = {};
      for (const cell of cellsOf(matrix, [name])) {
        const r = await runCell(cell, { backend, subject, budgets: matrix.budgets });
        for (const c of r.checks) {
          if (c.status === "fail" && missing.has(c.id)) {
            missing.delete(c.id);
            caughtAt[c.id] = r.id;
          }
        }
        if (missing.size === 0) break;
      }
      expect([...missing], `not caught on any of ${matrix.cases.length} cells`).toEqual([]);
      expect(Object.keys(caughtAt).sort()).toEqual([...targets].sort());
    });
  }
});

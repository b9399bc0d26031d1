/**
 * docs/strength.md is generated (`npm run mutation`, scripts/docs/mutation-report.ts) from docs/mutation.json:
 * the committed page must be exactly that rendering with the cpu matrix as it is now, the score must
 * reach 95%, and every surviving mutant must still point at a line of the source and have its reason.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { explanationOf, mutationScore, renderStrength, summarizeStryker, type MutationData } from "../../scripts/docs/mutation-report.ts";
import { cpuSize } from "../../scripts/mutation.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const data = JSON.parse(readFileSync(`${ROOT}docs/mutation.json`, "utf8")) as MutationData;

describe("docs/strength.md", () => {
  it("is the rendering of docs/mutation.json with the cpu matrix as it is (npm run mutation -- --render-only)", () => {
    expect(readFileSync(`${ROOT}docs/strength.md`, "utf8")).toBe(renderStrength(data, cpuSize()));
  });

  it("reports a mutation score of at least 95% on the subjects, recomputed from the counts", () => {
    expect(mutationScore(data.after.counts)).toBe(data.after.score);
    expect(data.after.score).toBeGreaterThanOrEqual(95);
    expect(data.after.counts.NoCoverage).toBe(0);
  });

  it("explains every surviving mutant, each still a line of its source file", () => {
    for (const u of data.after.undetected) {
      expect(explanationOf(u), `${u.file}:${u.line}`).toBeDefined();
      const line = readFileSync(`${ROOT}${u.file}`, "utf8").split("\n")[u.line - 1]?.trim();
      expect(line, `${u.file}:${u.line} moved: rerun npm run mutation`).toBe(u.original);
    }
  });

  it("refuses to render a survivor without an explanation", () => {
    const report = {
      files: { "harness/subject/builtin/x.ts": { source: "a\nreturn norm;\n", mutants: [{ mutatorName: "X", replacement: "0", status: "Survived", location: { start: { line: 2, column: 1 } } }] } },
    };
    const run = summarizeStryker(report, 1);
    expect(run.score).toBe(0);
    expect(() => renderStrength({ suite: "x", after: run, before: null }, { cases: 1, cells: 4 })).toThrow(/unexplained surviving mutants[\s\S]*x\.ts:2:1 X: return norm; -> 0/);
  });
});

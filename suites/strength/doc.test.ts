/**
 * docs/strength.md is generated (`npm run mutation`, scripts/docs/mutation-report.ts) from docs/mutation.json:
 * the committed page must be exactly that rendering with the cpu matrix as it is now, the score must
 * reach 95%, and every surviving mutant must still point at a line of the source and have its reason.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { explanationOf, mergeScoped, mutationScore, renderStrength, runOf, summarizeStryker, type MutationData } from "../../scripts/docs/mutation-report.ts";
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
    // a mutant no test covers counts against the score and must be explained like a survivor (a line never taken)
    for (const u of data.after.undetected.filter((x) => x.status === "NoCoverage")) expect(explanationOf(u), `${u.file}:${u.line}`).toBeDefined();
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

  it("merges a scoped run: its files' figures replace theirs with the commit and suite, the score is the sum over the files", () => {
    const report = (file: string, statuses: string[]) => ({
      files: { [file]: { source: "a\nb\n", mutants: statuses.map((status) => ({ mutatorName: "X", replacement: "0", status, location: { start: { line: 1, column: 1 } } })) } },
    });
    const whole = summarizeStryker({ files: { ...report("a.ts", ["Killed", "Killed"]).files, ...report("b.ts", ["Killed", "Survived"]).files } }, 60);
    const b = summarizeStryker(report("b.ts", ["Killed", "Killed", "Killed"]), 5);
    const merged = mergeScoped(whole, b, { commits: { "b.ts": "abc1234" }, suite: "fast" }, { commits: { "a.ts": "old", "b.ts": "old" }, suite: "full" });
    expect(merged.counts.Killed).toBe(5);
    expect(merged.counts.Survived).toBe(0);
    expect(merged.score).toBe(100);
    expect(merged.undetected).toEqual([]);
    expect(runOf(merged, "a.ts")).toMatchObject({ commits: { "a.ts": "old" }, suite: "full", seconds: 60 });
    expect(runOf(merged, "b.ts")).toMatchObject({ commits: { "b.ts": "abc1234" }, suite: "fast", seconds: 5 });
    expect(merged.seconds).toBe(65);
    const again = mergeScoped(merged, summarizeStryker(report("a.ts", ["Survived"]), 1), { commits: { "a.ts": "def5678" }, suite: "fast" });
    expect(again.runs!.map((r) => Object.keys(r.commits))).toEqual([["b.ts"], ["a.ts"]]);
    expect(again.score).toBe(75);
  });
});

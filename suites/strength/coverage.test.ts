/**
 * Issue 14: matrix design by coverage. `clip-parity list matrices --coverage` prints, per built-in
 * matrix, the requirements of matrix/coverage.ts and how many cases meet each; cpu (the main job) and
 * nightly must meet every one, each as many times as it asks (issue 22: the corners on several cells).
 * The reduction-group shapes no debug model has at these world sizes (empty shards, groups whose
 * partials are ordered by rank) are met by the regression cells, which both matrices' whole runs run.
 * No built-in matrix holds a cell twice.
 */
import { describe, expect, it } from "vitest";
import { cellId } from "../../harness/cell/cell.ts";
import { builtinMatrices, uniqueCases } from "../../matrix/index.ts";
import { caseFacts, checkCanFail, matrixCoverage } from "../../matrix/coverage.ts";
import { CHECK_IDS } from "../../harness/checks/index.ts";
import { cli } from "../reports/fixtures.ts";

/** What the debug models cannot give at world <= 16: met by the regression cells alone. */
const GAPS = [
  "reduction group with a rank holding only empty shards: dense mesh",
  "reduction group with a rank holding only empty shards: sparse mesh",
  "two ranks sharing two reduction groups whose partials may be ordered differently by rank, finite p",
];

/** "coverage of NAME: ..." blocks of the output: requirement -> cases. */
function tables(stdout: string): Map<string, Map<string, number>> {
  const out = new Map<string, Map<string, number>>();
  let current: Map<string, number> | undefined;
  for (const line of stdout.split("\n")) {
    const head = /^coverage of (\S+): (\d+) of (\d+) requirements met$/.exec(line);
    if (head) out.set(head[1]!, (current = new Map()));
    else if (/^regression cells/.test(line)) out.set("regressions", (current = new Map()));
    else {
      const row = /^ {2}(ok {5}|MISSING) +(\d+) {2}(.+?)( \(at least \d+\))?$/.exec(line);
      if (row && current) current.set(row[3]!, Number(row[2]));
    }
  }
  return out;
}

describe("list matrices --coverage", () => {
  it("cpu and nightly meet every requirement as often as it asks; the group shapes the models lack come from the regression cells", { timeout: 600_000 }, async () => {
    const r = await cli(["list", "matrices", "--coverage"]);
    expect(r.code).toBe(0);
    const t = tables(r.stdout);
    expect([...t.keys()]).toEqual([...Object.keys(builtinMatrices()), "regressions"]);
    for (const name of ["cpu", "nightly"]) {
      expect(r.stdout.split(`coverage of ${name}:`)[1]!.split("\ncoverage of")[0], `${name}: a requirement is not met`).not.toMatch(/MISSING/);
      const fromCases = matrixCoverage(builtinMatrices()[name]!, []).requirements.filter((q) => q.cases === 0).map((q) => q.id);
      expect(fromCases, `${name}: requirements the model cases alone do not meet`).toEqual(GAPS);
      // every (check, tolerance class) pair of the matrix's subjects (exact and fp32 for the correct ones)
      for (const check of CHECK_IDS) for (const cls of ["exact", "fp32"]) expect(t.get(name)!.get(`${check} x ${cls}: can fail`)).toBeGreaterThan(0);
    }
    for (const gap of GAPS) expect(t.get("regressions")!.get(gap)).toBeGreaterThan(0);
    const cpuReqs = matrixCoverage(builtinMatrices().cpu!).requirements;
    expect(cpuReqs.map((q) => q.id)).toContain("Partial(sum) gradient over 2+ ranks, finite norm");
    expect(r.stdout).toMatch(new RegExp(`^coverage of cpu: ${cpuReqs.length} of ${cpuReqs.length} requirements met$`, "m"));
  });

  it("--coverage goes with `list matrices` only", async () => {
    const r = await cli(["list", "subjects", "--coverage"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--coverage goes with `list matrices`; got list subjects --coverage/);
  });

  it("judges where a check can fail from the case: a clip corner, an inactive cell, a non-finite one", () => {
    const cpu = builtinMatrices().cpu.cases;
    const corner = caseFacts(cpu.find((c) => c.regime === "inactive" && c.normType === 3 && c.maxNorm !== undefined)!);
    expect(corner.clipCoef).toBeLessThan(1);
    expect(corner.exp).toBeLessThan(0);
    expect(checkCanFail("scaling.nonempty", corner)).toBe(true);
    const inactive = caseFacts(cpu.find((c) => c.regime === "inactive" && c.normType === 2 && c.maxNorm === undefined)!);
    expect(inactive.clipCoef).toBe(1);
    expect(checkCanFail("scaling.nonempty", inactive)).toBe(false);
    const nan = caseFacts(cpu.find((c) => c.regime === "nonfinite-nan" && c.errorIfNonfinite === undefined)!);
    expect(checkCanFail("errors.nonfinite", nan)).toBe(true);
    expect(checkCanFail("parity.tensors", nan)).toBe(false);
    // every check says when it can fail (its module's canFail); an id no module defines is refused, not taken for a check no case can fail
    for (const id of CHECK_IDS) expect(() => checkCanFail(id, nan), id).not.toThrow();
    expect(() => checkCanFail("parity.new", nan)).toThrow(/checkCanFail: no check "parity\.new"/);
  });
});

describe("built-in matrices hold each cell once", () => {
  for (const [name, m] of Object.entries(builtinMatrices())) {
    it(name, () => {
      const ids = m.cases.map((c) => cellId({ subject: "", ...c }));
      const seen = new Set<string>();
      const duplicates = ids.filter((id) => seen.has(id) || !seen.add(id));
      expect(duplicates).toEqual([]);
    });
  }

  it("uniqueCases drops a repeated case and keeps the order", () => {
    const [a, b] = builtinMatrices().cpu.cases;
    expect(uniqueCases([a!, b!, { ...a! }, b!])).toEqual([a, b]);
  });
});

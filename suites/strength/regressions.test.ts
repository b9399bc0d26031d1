/**
 * matrix/regressions.json: the fuzzer's shrunk counterexamples kept as fixed regression cells. Every
 * correct subject passes each cell; the subject with the bug fails it by the checks the entry names.
 * The empty-shard reduction groups live here (dense and sparse mesh): no debug-model cell has one.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CORRECT_SUBJECTS, loadSubject } from "../../harness/registry/registry.ts";
import { describeCase } from "../../harness/fuzz/case.ts";
import { runFuzzCase } from "../../harness/fuzz/run.ts";
import { InputError } from "../../harness/errors.ts";
import { loadRegressions, parseRegressions, regressionCase, REGRESSIONS_FORMAT } from "../../matrix/regressions.ts";

const regressions = loadRegressions();

describe("matrix/regressions.json", () => {
  it("holds the counterexamples of every test-local bug, the empty-shard groups on both meshes among them", () => {
    const bugs = new Set(regressions.map((r) => r.catches.subject));
    expect([...bugs].sort()).toEqual(
      ["bucket-order-by-rank", "float64-norm", "general-p-as-2", "leader-first-axis", "leaky", "no-eps", "nonfinite-ignored", "skip-empty-bucket"].map((n) => `./suites/strength/subjects/${n}.ts`).sort(),
    );
    expect(regressions.filter((r) => r.catches.subject.endsWith("skip-empty-bucket.ts")).map((r) => r.fuzzCase.params.map((p) => p.mesh).join())).toEqual(["dense", "sparse"]);
  });

  for (const [i, r] of regressions.entries()) {
    const name = describeCase(regressionCase(r, r.catches.subject));
    it(`cell ${i}: every correct subject passes; ${r.catches.subject} fails ${r.catches.checks.join(", ")}: ${name}`, async () => {
      for (const s of CORRECT_SUBJECTS) {
        const o = await runFuzzCase(regressionCase(r, s), await loadSubject(s));
        expect(o.violations.map((v) => `${s}: ${v.id}: ${v.message}`)).toEqual([]);
      }
      const bad = await runFuzzCase(regressionCase(r, r.catches.subject), await loadSubject(r.catches.subject));
      expect(bad.violations.map((v) => v.id)).toEqual(expect.arrayContaining(r.catches.checks));
    });
  }

  it("a bad file is refused with the file, the entry and the field", () => {
    const dir = mkdtempSync(join(tmpdir(), "clip-parity-regressions-"));
    const path = join(dir, "r.json");
    writeFileSync(path, JSON.stringify({ format: REGRESSIONS_FORMAT, cells: [{ note: "x", catches: { subject: "bucketed", checks: [] }, case: {} }] }));
    expect(() => loadRegressions(path)).toThrow(InputError);
    expect(() => loadRegressions(path)).toThrow(/regressions file .*r\.json is not a valid regressions file:\n {2}cells\[0\]\.catches\.checks: /);
    const c = { layout: { pp: 1, dp_replicate: 1, dp_shard: 1, cp: 1, tp: 1, ep: 1 }, dtype: "f32", norm: 2, regime: "activ", seed: 0, params: [] };
    expect(() => parseRegressions(JSON.stringify({ format: REGRESSIONS_FORMAT, cells: [{ note: "x", catches: { subject: "bucketed", checks: ["liveness"] }, case: c }] }), "f.json")).toThrow(
      /f\.json cells\[0\]\.case is not a valid fuzz case file:\n {2}regime: .*"activ"|f\.json cells\[0\]\.case is not a valid fuzz case file:\n {2}regime: /,
    );
    expect(() => parseRegressions("{", "f.json")).toThrow(/^f\.json: /);
  });
});

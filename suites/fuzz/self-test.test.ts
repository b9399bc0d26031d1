/**
 * The fuzzer's self-test: for every known-bad subject the fuzzer finds, from the CI seed and within
 * SELF_TEST_RUNS generated cases (the bound: 100), a case that fails one of the subject's own
 * `catchBy` checks, and shrinks it to a cell SMALLER than the cell the fixed cpu matrix catches it on:
 * no more ranks, and strictly fewer logical parameters and logical elements (harness/fuzz/case.ts
 * `smallerThan`). The replay file it writes reproduces the failure.
 *
 * MATRIX_CELLS names, per subject, the first cell of the cpu matrix (in matrix order) on which
 * suites/matrix.test.ts catches it; the test checks that the cell is in the cpu matrix and still
 * fails one of the subject's checks, so the table cannot silently go stale.
 */
import { afterAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cellsOf, resolveMatrix } from "../../matrix/index.ts";
import { BUILTIN_SUBJECTS, KNOWN_BAD_SUBJECTS } from "../../harness/registry/registry.ts";
import { cellId } from "../../harness/cell/cell.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { getModel } from "../../harness/model/models.ts";
import { worldSize } from "../../harness/layout/layout.ts";
import { caseSize, smallerThan, type CellSize } from "../../harness/fuzz/case.ts";
import { envSeed, fuzzSubject, SELF_TEST_RUNS } from "../../harness/fuzz/fuzz.ts";
import { readCaseFile } from "../../harness/fuzz/replay.ts";
import { runFuzzCase } from "../../harness/fuzz/run.ts";

const MATRIX_CELLS: Record<string, string> = {
  "hf-replicate": "hf-replicate/single/llama3-debug/f32/n2/active/s0",
  "no-pp-reduce": "no-pp-reduce/pp2/llama3-debug/f32/n2/active/s0",
  "replica-twice": "replica-twice/pp2/deepseek-v3-debug/f32/n2/active/s0",
  "replica-unscaled": "replica-unscaled/pp2/deepseek-v3-debug/f32/n2/active/s0",
  "tp-replicate-summed": "tp-replicate-summed/tp2/llama3-debug/f32/n2/active/s0",
  "inf-as-sum": "inf-as-sum/dp_shard2/llama3-debug/bf16/ninf/boundary/s0",
  // one rank: a collective over a group of one moves nothing and is not counted, so the smallest cell is two ranks
  unbucketed: "unbucketed/dp_shard2/llama3-debug/f32/n2/active/s0",
  "ep-skip-empty": "ep-skip-empty/pp4/deepseek-v3-debug/f32/n2/active/s0",
  "padding-counted": "padding-counted/tp3/llama3-debug/f32/n2/active/s0",
  "bf16-norm": "bf16-norm/single/llama3-debug/f32/n2/active/s0",
  // a small norm is enough: the 1-norm of inactive's e = -20 gradients (about 3) still clips, and 1e-6 moves its coefficient
  "eps-per-rank": "eps-per-rank/cp2/llama3-debug/f32/n1/inactive/s0",
};

const seed = envSeed();
const cpu = resolveMatrix("cpu");
const outDir = mkdtempSync(join(tmpdir(), "clip-parity-fuzz-self-test-"));
afterAll(() => rmSync(outDir, { recursive: true, force: true }));

describe(`fuzz self-test: every known-bad subject is caught within ${SELF_TEST_RUNS} cases and shrunk below its matrix cell`, () => {
  it("names a matrix cell for every known-bad subject", () => {
    expect(Object.keys(MATRIX_CELLS).sort()).toEqual([...KNOWN_BAD_SUBJECTS].sort());
  });

  for (const name of KNOWN_BAD_SUBJECTS) {
    const subject = BUILTIN_SUBJECTS[name]!;
    const targets = subject.catchBy ?? [];
    it(`${name}: caught by ${targets.join(" or ")}`, { timeout: 120_000 }, async () => {
      expect(targets.length).toBeGreaterThan(0);

      // The matrix cell that catches it, and its size.
      const cell = cellsOf(cpu, [name]).find((c) => cellId(c) === MATRIX_CELLS[name]);
      expect(cell, `${MATRIX_CELLS[name]} is not a cell of the cpu matrix: update MATRIX_CELLS`).toBeDefined();
      const onMatrix = await runCell(cell!, { subject });
      expect(onMatrix.checks.filter((c) => c.status === "fail" && targets.includes(c.id)).map((c) => c.id)).not.toEqual([]);
      const model = getModel(cell!.model);
      const matrixSize: CellSize = { ranks: worldSize(cell!.layout), params: model.params.length, elements: model.totalParams };

      // The fuzzer finds and shrinks a counterexample.
      const run = await fuzzSubject(subject, { seed, numRuns: SELF_TEST_RUNS, targets, outDir });
      expect(run.details.failed, `no case of ${SELF_TEST_RUNS} (seed ${seed}) failed ${targets.join(" or ")}`).toBe(true);
      expect(run.details.numRuns).toBeLessThanOrEqual(SELF_TEST_RUNS);
      const ce = run.counterexample!;
      expect(ce.violations.length).toBeGreaterThan(0);
      for (const v of ce.violations) expect(targets).toContain(v.id);
      const size = caseSize(ce.fuzzCase);
      expect(smallerThan(size, matrixSize), `${JSON.stringify(size)} is not smaller than ${MATRIX_CELLS[name]} ${JSON.stringify(matrixSize)}`).toBe(true);

      // Its replay file reproduces the failure.
      const replayed = await runFuzzCase(readCaseFile(ce.path), subject);
      expect(replayed.violations.map((v) => v.id)).toEqual(expect.arrayContaining(ce.violations.map((v) => v.id)));
    });
  }
});

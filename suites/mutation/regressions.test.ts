/**
 * The regression cells (matrix/regressions.json) against each mutant: every correct subject must pass
 * each cell, in-process (the fuzz runner calls runCell in this thread, where the mutants live). They
 * hold what no debug-model cell has: sub-mesh parameters and empty-shard reduction groups.
 */
import { describe, expect, it } from "vitest";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS } from "../../harness/registry/registry.ts";
import { describeCase } from "../../harness/fuzz/case.ts";
import { runFuzzCase } from "../../harness/fuzz/run.ts";
import { loadRegressions, regressionCase } from "../../matrix/regressions.ts";

describe("regression cells, in-process: every correct subject passes", () => {
  for (const subject of CORRECT_SUBJECTS) {
    for (const r of loadRegressions()) {
      const c = regressionCase(r, subject);
      it(describeCase(c), async () => {
        const o = await runFuzzCase(c, BUILTIN_SUBJECTS[subject]!);
        expect(o.violations.map((v) => `${v.id}: ${v.message}`)).toEqual([]);
      });
    }
  }
});

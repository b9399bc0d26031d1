/**
 * `npm run mutation`: StrykerJS mutates the correct subjects (harness/subject/builtin/*, subject/common.ts)
 * and runs this suite against each mutant; a mutant is killed when some cell fails a check.
 * One test per cell, so that Stryker's per-test coverage runs only the cells of the mutated subject
 * and its bail stops at the first failing cell. Run directly, every cell must pass:
 * `npx vitest run -c vitest.mutation.config.ts`.
 */
import { describe, expect, it } from "vitest";
import { cellId } from "../../harness/cell/cell.ts";
import { failures, mutationCells, runInProcess } from "./cells.ts";

describe("cpu matrix, in-process: every cell passes every check", () => {
  for (const cell of mutationCells()) {
    it(cellId(cell), async () => {
      const r = await runInProcess(cell);
      expect(failures(r)).toEqual([]);
    });
  }
});

/**
 * The optimizer-owned correct subjects under mutation (`titan-mtp`, harness/subject/optimizer.ts): the
 * finalize section's cells, one test per cell, and the train section's passing cases, where a mutant
 * that breaks the tie sync or the replicas' coefficient shows as a train.parity difference.
 */
import { describe, expect, it } from "vitest";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { runTrain, trainId } from "../../harness/training/train-parity.ts";
import { cellId } from "../../harness/cell/cell.ts";
import { failures, optimizerCells, optimizerTrainCases, runInProcess } from "./cells.ts";

describe("finalize section, optimizer-owned subjects, in-process: every cell passes every check", () => {
  for (const cell of optimizerCells()) {
    it(cellId(cell), async () => {
      const r = await runInProcess(cell);
      expect(failures(r)).toEqual([]);
    });
  }
});

describe("train section, optimizer-owned subjects: bitwise parity across layouts", () => {
  for (const c of optimizerTrainCases()) {
    it(trainId(c), async () => {
      const r = await runTrain(c, { subject: BUILTIN_SUBJECTS[c.subject]! });
      expect(r.check.status, r.check.message).toBe("pass");
    });
  }
});

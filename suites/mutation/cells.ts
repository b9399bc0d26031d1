/**
 * The cells the mutation suite runs against each mutant of the correct subjects: every cell of the
 * `cpu` matrix (each correct subject on each case). They run in-process through the library runner
 * (`workers: 0`): in a worker thread the subjects would be loaded from their original sources, and
 * Stryker's instrumented modules (the mutants) would never run.
 */
import { Writable } from "node:stream";
import { builtinMatrices } from "../../matrix/index.ts";
import { CORRECT_SUBJECTS, OPTIMIZER_SUBJECTS } from "../../harness/registry/registry.ts";
import { finalizeMatrix } from "../../matrix/finalize.ts";
import { trainCases, type TrainCase } from "../../matrix/train.ts";
import { runMatrix } from "../../harness/run/runner.ts";
import { cellId, type Case, type Cell } from "../../harness/cell/cell.ts";
import type { CellResult } from "../../harness/results/types.ts";

export function mutationCells(): Cell[] {
  const cpu = builtinMatrices().cpu!;
  return CORRECT_SUBJECTS.flatMap((subject) => cpu.cases.map((c) => ({ subject, ...c })));
}

/**
 * The optimizer-owned correct subjects (`titan-mtp`) do not run in the cpu matrix: they get the
 * finalize section's cells, and the train section's passing cases (their tie sync shows only there).
 */
export function optimizerCells(): Cell[] {
  const fin = finalizeMatrix();
  return OPTIMIZER_SUBJECTS.flatMap((subject) => fin.cases.map((c) => ({ subject, ...c })));
}

export function optimizerTrainCases(): TrainCase[] {
  return trainCases("cpu").filter((c) => c.expect === "pass" && OPTIMIZER_SUBJECTS.includes(c.subject));
}

/** Where the golden's verdict lines go: nowhere (a drift fails the cell's `golden` check). */
const quiet = new Writable({ write: (_chunk, _encoding, done) => done() });

/**
 * One cell, in-process, through the same runner as `clip-parity run`, compared with golden/cpu.json
 * (every cell here is a cpu cell): a mutant of the gradient rules (gradients/specs.ts) gives the subject and
 * the reference the same wrong gradients, which only the golden's tensor hashes show.
 */
export async function runInProcess(cell: Cell): Promise<CellResult> {
  const { subject, ...c } = cell;
  const out = await runMatrix(
    { name: "cpu", description: cellId(cell), backend: "cpu", cases: [c as Case] },
    { subjects: [subject], workers: 0, golden: "check", goldenOut: quiet, timeoutMs: 20_000 },
  );
  return out.results[0]!;
}

/** The failing checks of a result, as "id: message" lines. */
export function failures(r: CellResult): string[] {
  return r.checks.filter((c) => c.status === "fail").map((c) => `${c.id}: ${c.message}`);
}

/**
 * The regression section of a matrix (matrix/regressions.json): every fixed fuzz case run with each
 * subject of a whole `run`, in the pool like a cell, and every subject must pass every case, as on the
 * matrix's cells: a failure is exit 1 (that the subject a case was kept for fails it is asserted by
 * suites/strength/regressions.test.ts). This is how the main job meets the cases no debug-model cell has:
 * a rank holding only empty shards of its group, sub-meshes, buckets ordered by rank.
 */
import type { CheckResult } from "../harness/results/types.ts";
import { describeCase, type FuzzCase } from "../harness/fuzz/case.ts";
import type { FuzzOutcome } from "../harness/fuzz/run.ts";
import type { Isolated, IsolatedOptions } from "../harness/sandbox/isolated.ts";
import { regressionsIsolated } from "../harness/fuzz/replay.ts";
import { regressionCase, regressionRepro, regressionSections, type Regression } from "../matrix/regressions.ts";
import { runSection, type SectionIO } from "./section.ts";
import type { SectionResult } from "../harness/results/sections.ts";

interface RegressionRun {
  index: number;
  fuzzCase: FuzzCase;
  expect: "pass";
}

function regressionRuns(regressions: readonly Regression[], subjects: readonly string[]): RegressionRun[] {
  return subjects.flatMap((spec) => regressions.map((r, index) => ({ index, fuzzCase: regressionCase(r, spec), expect: "pass" as const })));
}

/** A case's verdict as one check: the first property it broke, or a pass. */
function outcomeCheck(o: FuzzOutcome): CheckResult {
  const v = o.violations[0];
  return v ? { id: v.id, status: "fail", message: v.message } : { id: "regression", status: "pass", message: "" };
}

type NamedOutcome = FuzzOutcome & { id: string; durationMs: number };

/** An outcome with the id and duration the section prints. */
function named(o: Isolated<FuzzOutcome>, id: string): Isolated<NamedOutcome> {
  if (!o.result) return { fault: o.fault ?? "no result" };
  const result = { ...o.result, id, durationMs: o.result.result.durationMs };
  return o.fault === null ? { result, fault: null } : { result, fault: o.fault };
}

const idOf = (r: RegressionRun) => `regression ${r.index}: ${describeCase(r.fuzzCase)}`;

/** Runs the matrix's regression section with `subjects`; null when the matrix has none. */
export async function runRegressionSection(
  matrix: string,
  subjects: readonly string[],
  io: SectionIO = {},
  isolated: IsolatedOptions = {},
): Promise<SectionResult | null> {
  const out = io.out ?? process.stdout;
  if (!Object.hasOwn(regressionSections(), matrix)) return null;
  const regressions = regressionSections()[matrix]!;
  out.write(`the ${matrix} matrix's ${regressions.length} regression cells (matrix/regressions.json) run with each subject\n`);
  return runSection<RegressionRun, NamedOutcome>(
    {
      kind: "regression",
      matrix,
      cases: regressionRuns(regressions, subjects),
      sections: Object.keys(regressionSections()),
      runAll: async (runs) => {
        const repro = (r: RegressionRun) => regressionRepro(r.index, r.fuzzCase.subject);
        const outcomes = await regressionsIsolated(runs.map((r) => ({ fuzzCase: r.fuzzCase, repro: repro(r) })), isolated);
        return outcomes.map((o, i) => named(o, idOf(runs[i]!)));
      },
      idOf,
      checkOf: outcomeCheck,
      ...io,
      out,
    },
    undefined,
  );
}

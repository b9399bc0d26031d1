/**
 * The matrix suite: `npm test -- --matrix NAME|FILE [--backend B]` (default: cpu on cpu).
 *
 * The cells run through the library runner, exactly as `clip-parity run --matrix ...` runs them, so
 * the two give the same verdict on any matrix (a built-in one or a user's file naming user subjects):
 * one test per cell, failing when any check of the cell fails. For the matrices built to expose every
 * known bug (cpu, nightly), each known-bad subject must also be caught by its own check on some cell.
 */
import { afterAll, describe, expect, it } from "vitest";
import { resolveMatrix } from "../matrix/index.ts";
import { BUILTIN_SUBJECTS, KNOWN_BAD_SUBJECTS } from "../harness/registry/registry.ts";
import { executeRun, prepareRun, runMatrix, type RunOutput } from "../harness/run/runner.ts";
import { parseBackend, resolveBackend } from "../harness/run/policy.ts";
import { suiteGoldenMode } from "../cli/test.ts";
import { cellId } from "../harness/cell/cell.ts";
import { reportSessionFromEnv } from "../reports/index.ts";
import { shownCatchBy } from "../harness/results/json.ts";
import { hasSections, runSections } from "../cli/run.ts";
import { sectionSummaryText, type SectionResult } from "../harness/results/sections.ts";
import { runVerdict } from "../harness/run/verdict.ts";

const matrixArg = process.env.CLIP_PARITY_MATRIX ?? "cpu";
const matrix = resolveMatrix(matrixArg);
const requested = process.env.CLIP_PARITY_BACKEND;
const requestedBackend = requested === undefined ? undefined : parseBackend(requested, "CLIP_PARITY_BACKEND");
// a golden drift fails the suite on a developer's machine as in CI (cli/test.ts decides the mode for npm test)
const golden = suiteGoldenMode(matrix.name, resolveBackend(matrix, requestedBackend, `npm test -- --matrix ${matrixArg}`));
// supervised as `clip-parity run` is: a subject that kills the process fails its cell, the others are kept
const options = { backend: requestedBackend, rerun: `npm test -- --matrix ${matrixArg}`, golden, supervise: true };
const prepared = await prepareRun(matrix, options);
const backend = prepared.backend;
// `npm test -- --report json,junit,md,html --out DIR` writes the run's cells as reports.
const reports = reportSessionFromEnv({ title: `clip-parity: matrix ${matrix.name} (npm test)`, matrix: matrix.name, backend });

let output: Promise<RunOutput> | undefined;
/** The whole matrix runs once, when the first of its tests asks for it. */
const whole = () => (output ??= executeRun(prepared, options, reports?.hooks));
afterAll(async () => {
  if (reports && output) {
    const o = await output;
    await reports.finish(o.results, o.summary, o.notes, { catchBy: shownCatchBy(o.results, o.catchBy) });
  }
});

const RUN_TIMEOUT = 3_600_000;

describe(`matrix ${matrix.name} on ${backend}: every cell passes every check`, () => {
  for (const [i, cell] of prepared.cells.entries()) {
    it(cellId(cell), { timeout: RUN_TIMEOUT }, async () => {
      const r = (await whole()).results[i]!;
      expect(r.id).toBe(cellId(cell));
      const failures = r.checks.filter((c) => c.status === "fail").map((c) => `${c.id}: ${c.message}`);
      expect(failures).toEqual([]);
      expect(r.checks.filter((c) => c.status === "pass").length).toBeGreaterThan(0);
    });
  }
});

// The cpu and nightly matrices are built to expose every known bug (uneven shards, expert-less PP
// stages, ties across stages); a smaller matrix such as gpu4 need not contain a cell for each.
const EXPOSES_EVERY_BUG = ["cpu", "nightly"];

describe.runIf(EXPOSES_EVERY_BUG.includes(matrix.name) && matrixArg === matrix.name)(
  `matrix ${matrix.name} on ${backend}: every known-bad subject is caught by its own check`,
  () => {
    for (const name of KNOWN_BAD_SUBJECTS) {
      const targets = BUILTIN_SUBJECTS[name]!.catchBy ?? [];
      it(`${name} is caught by ${targets.join(" and ")}`, { timeout: RUN_TIMEOUT }, async () => {
        expect(targets.length).toBeGreaterThan(0);
        const missing = new Set(targets);
        const caughtAt: Record<string, string> = {};
        const out = await runMatrix(matrix, {
          backend,
          subjects: [name],
          golden: "off",
          stopWhen: (r) => {
            for (const c of r.checks) {
              if (c.status === "fail" && missing.delete(c.id)) caughtAt[c.id] = r.id;
            }
            return missing.size === 0;
          },
        });
        expect([...missing], `not caught on any of ${out.results.length} cells`).toEqual([]);
        expect(Object.keys(caughtAt).sort()).toEqual([...targets].sort());
      });
    }
  },
);

// A whole run of a matrix with sections (cpu, nightly, or a file of that name) also judges its regression, train
// and resume cases, as `clip-parity run --matrix` does (cli/run.ts runSections), and the suite's verdict is the
// command's (harness/run/verdict.ts runVerdict): the two cannot disagree on a golden drift or a failing section.
let sections: Promise<{ results: SectionResult[]; lines: string[] }> | undefined;
const sectionsOnce = () =>
  (sections ??= (async () => {
    const lines: string[] = [];
    const out = { write: (t: string) => (lines.push(t), true) } as unknown as NodeJS.WritableStream;
    return { results: await runSections(matrix.name, (await whole()).results, { out }, {}), lines };
  })());

describe.runIf(await hasSections(matrix.name))(`matrix ${matrix.name} on ${backend}: its sections, as clip-parity run judges them`, () => {
  it("every regression, train and resume case is as expected", { timeout: RUN_TIMEOUT }, async () => {
    const s = await sectionsOnce();
    const notAsExpected = s.results.flatMap((x) => x.cases.filter((c) => !c.met).map((c) => `${sectionSummaryText(x)}: ${c.id}: ${c.check} ${c.status}: ${c.message}`));
    expect(notAsExpected, s.lines.join("")).toEqual([]);
  });
});

describe(`matrix ${matrix.name} on ${backend}: the run's verdict`, () => {
  it("is PASS, as clip-parity run --matrix decides it (cells, golden, sections)", { timeout: RUN_TIMEOUT }, async () => {
    const o = await whole();
    const s = (await hasSections(matrix.name)) ? (await sectionsOnce()).results : [];
    expect(`verdict: ${runVerdict(o.results, s)}`, [...o.notes, ...s.map(sectionSummaryText)].join("\n")).toBe("verdict: PASS");
  });
});

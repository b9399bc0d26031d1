/** `clip-parity run`: a matrix (built in or a file) through the library runner, with reports. */
import { combineHooks, runMatrix, DEFAULT_TIMEOUT_MS, type RunMatrixOptions, type RunOutput } from "../harness/run/runner.ts";
import { DEFAULT_HEAP_MB } from "../harness/sandbox/pool.ts";
import { GOLDEN_MODES } from "../harness/run/golden.ts";
import { DEFAULT_LIMITS, parseBackend, subjectsOf } from "../harness/run/policy.ts";
import { formatShard, parseShard } from "../harness/run/shard.ts";
import { cellFailed, summaryLine } from "../harness/results/summary.ts";
import { runVerdict, type RunVerdict } from "../harness/run/verdict.ts";
import { cellJson, jsonReport, shownCatchBy } from "../harness/results/json.ts";
import type { CellJson } from "../harness/results/schema.ts";
import { assertWritableDir, assertWritableFile, humanOutput, writeOutputFile } from "../harness/util/fs.ts";
import { resolveMatrix } from "../matrix/index.ts";
import { DEFAULT_OUT_DIR, REPORTER_NAMES, reportSession } from "../reports/index.ts";
import { applyWith, EXIT_STATUS, list, parseCommand, WITH_FLAG, withPinsOf, parseInteger, parseRegExp, str, type CommandSpec } from "./args.ts";
import { progressHooks } from "./progress.ts";
import { printFailures } from "./print.ts";
import { runTrainMatrix } from "./train.ts";
import { runResumeMatrix } from "./resume.ts";
import { runRegressionSection } from "./regressions.ts";
import { sectionProgress, type SectionIO } from "./section.ts";
import { sectionCounts, sectionSummaryText, sectionTitle, type SectionResult } from "../harness/results/sections.ts";
import { subjectInfo, type IsolatedOptions } from "../harness/sandbox/isolated.ts";
import { BUILTIN_SUBJECTS, isExternalSpec } from "../harness/registry/registry.ts";

export const spec: CommandSpec = {
  name: "run",
  summary: "Runs a matrix: every subject on every case, every check; prints the failures and a summary line.",
  flags: {
    matrix: { type: "string", value: "NAME|FILE", description: "a built-in matrix (clip-parity list matrices) or a matrix JSON file", default: "cpu" },
    backend: { type: "string", value: "cpu|cuda|meta", description: "the backend (cuda matrices need CUDA)", defaultText: "the matrix's own" },
    subject: { type: "string", multiple: true, value: "NAME|PATH", description: "subjects to run instead of the matrix's (built-in name, module path or torch:...)" },
    with: WITH_FLAG,
    filter: { type: "string", value: "RE", description: "only the cells whose id matches the regular expression RE (clip-parity list cells shows them)" },
    exclude: { type: "string", value: "RE", description: "leave out the cells whose id matches RE" },
    bail: { type: "boolean", description: "stop at the first cell that fails unexpectedly (a known-bad subject's failures do not stop it)" },
    seed: { type: "string", value: "N", description: "run every case with this seed" },
    shard: { type: "string", value: "I/N", description: "only shard I of N (by a hash of the cell id)" },
    json: { type: "string", value: "FILE", description: "write every result as JSON (the --json shape)" },
    report: { type: "string", value: REPORTER_NAMES.join(","), description: "reporters to write (with --out)" },
    out: { type: "string", value: "DIR", description: "folder for the reports (--out alone writes every report)", defaultText: `${DEFAULT_OUT_DIR} when --report is given` },
    golden: { type: "string", value: GOLDEN_MODES.join("|"), description: "compare with (or rewrite) golden/<matrix>.json", defaultText: "check under CI when it exists for the backend" },
    "timeout-s": { type: "string", value: "S", description: "wall-clock limit of one cell in seconds", default: String(DEFAULT_TIMEOUT_MS / 1000) },
    "max-cells": { type: "string", value: "N", description: "refuse a run of more cells", default: String(DEFAULT_LIMITS.maxCells) },
    "max-world": { type: "string", value: "N", description: "refuse a cell of more ranks", default: String(DEFAULT_LIMITS.maxWorld) },
    jobs: { type: "string", value: "N", description: "worker threads that run cells", defaultText: "the cores" },
    "memory-budget-mb": { type: "string", value: "MB", description: "bytes the cells in flight may hold together", defaultText: "half the RAM" },
    "worker-heap-mb": { type: "string", value: "MB", description: "JavaScript heap of a worker (a subject past it fails isolation)", default: String(DEFAULT_HEAP_MB) },
    quiet: { type: "boolean", description: "no progress display" },
    progress: { type: "boolean", description: "where stderr is not a terminal, a progress line every 5% of the cells too (one every 10 s always)" },
  },
  notes: EXIT_STATUS,
};

/**
 * The main job judges an optimizer-owned subject by every section its shape can be judged by: besides
 * the matrix's cells (the finalize ones among them), the matrix's train and resume sections run with it
 * (an init sync, a flag never reset after step 1, a checkpoint: only these show). A whole run only: a
 * filter or a shard selects cells. (Every subject of a whole run also meets the matrix's regression cells:
 * cli/regressions.ts.)
 */
async function runOptimizerSections(
  matrix: string,
  results: readonly { cell: { subject: string } }[],
  io: SectionIO & { out: NodeJS.WritableStream },
  isolated: IsolatedOptions,
): Promise<SectionResult[]> {
  const { trainSections } = await import("../matrix/train.ts");
  const { resumeSections } = await import("../matrix/resume.ts");
  const sections: SectionResult[] = [];
  for (const spec of new Set(results.map((r) => r.cell.subject))) {
    if (isExternalSpec(spec) || (await subjectInfo(spec)).shape !== "optimizer") continue;
    io.out.write(`${spec} is an optimizer-owned clipper: the ${matrix} matrix's train and resume sections run with it\n`);
    if (Object.hasOwn(trainSections(), matrix)) sections.push(await runTrainMatrix(matrix, undefined, spec, io, isolated));
    if (Object.hasOwn(resumeSections(), matrix)) sections.push(await runResumeMatrix(matrix, undefined, spec, io, isolated));
  }
  return sections;
}

/** Whether a matrix, by its name (a file's included), has sections a whole run judges after its cells. */
export async function hasSections(matrix: string): Promise<boolean> {
  const [{ regressionSections }, { trainSections }, { resumeSections }] = await Promise.all([import("../matrix/regressions.ts"), import("../matrix/train.ts"), import("../matrix/resume.ts")]);
  return [regressionSections(), trainSections(), resumeSections()].some((s) => Object.hasOwn(s, matrix));
}

/**
 * The sections a whole run judges after its cells, in the order they run: regression, then train and resume.
 * `npm test -- --matrix` (suites/matrix.test.ts) runs them through this too, so both give one verdict.
 */
export async function runSections(
  matrix: string,
  results: readonly { cell: { subject: string } }[],
  io: SectionIO & { out: NodeJS.WritableStream },
  isolated: IsolatedOptions,
): Promise<SectionResult[]> {
  const regression = await runRegressionSection(matrix, [...new Set(results.map((r) => r.cell.subject))], io, isolated);
  return [...(regression ? [regression] : []), ...(await runOptimizerSections(matrix, results, io, isolated))];
}

/** The options of a run from its flags, every value checked before anything runs (exit 2). */
export function runOptions(v: Record<string, unknown>, flag = (f: string) => `--${f}`): RunMatrixOptions {
  const s = (k: string) => str(v as never, k);
  const opts: RunMatrixOptions = {};
  if (s("backend") !== undefined) opts.backend = parseBackend(s("backend")!, flag("backend"));
  const subjects = list(v as never, "subject");
  if (subjects) opts.subjects = subjects;
  if (s("filter") !== undefined) opts.filter = parseRegExp(s("filter")!, flag("filter"));
  if (s("exclude") !== undefined) opts.exclude = parseRegExp(s("exclude")!, flag("exclude"));
  if (s("seed") !== undefined) opts.seed = parseInteger(s("seed")!, flag("seed"));
  if (s("shard") !== undefined) opts.shard = parseShard(s("shard")!, flag("shard"));
  if (s("golden") !== undefined) opts.golden = s("golden");
  if (s("timeout-s") !== undefined) opts.timeoutMs = parseInteger(s("timeout-s")!, flag("timeout-s"), { min: 1, max: 86_400 }) * 1000;
  const limits: NonNullable<RunMatrixOptions["limits"]> = {};
  if (s("max-cells") !== undefined) limits.maxCells = parseInteger(s("max-cells")!, flag("max-cells"), { min: 1 });
  if (s("max-world") !== undefined) limits.maxWorld = parseInteger(s("max-world")!, flag("max-world"), { min: 1 });
  opts.limits = limits;
  if (s("jobs") !== undefined) opts.workers = parseInteger(s("jobs")!, flag("jobs"), { min: 1, max: 256 });
  if (s("memory-budget-mb") !== undefined) opts.memoryBudgetBytes = parseInteger(s("memory-budget-mb")!, flag("memory-budget-mb"), { min: 1 }) * 1024 * 1024;
  if (s("worker-heap-mb") !== undefined) opts.workerHeapMb = parseInteger(s("worker-heap-mb")!, flag("worker-heap-mb"), { min: 16, max: 65_536 });
  return opts;
}

export async function run(argv: string[]): Promise<number> {
  const started = performance.now();
  const v = parseCommand(spec, argv);
  const options = runOptions(v);
  const matrix = resolveMatrix(str(v, "matrix")!, options.limits?.maxCells);
  const pins = withPinsOf(v);
  if (pins.length) options.subjects = applyWith(subjectsOf(matrix, options.subjects), pins);
  const jsonPath = str(v, "json");
  if (jsonPath !== undefined) assertWritableFile(jsonPath, "--json");
  if (str(v, "out") !== undefined) assertWritableDir(str(v, "out")!, "--out");
  options.rerun = `clip-parity run --matrix ${str(v, "matrix")!}`;
  // the cells run in a child process: a subject that kills it fails its cell, and the run goes on (issue 55)
  options.supervise = true;
  const out = humanOutput(jsonPath);
  options.goldenOut = out; // with --json - the golden's verdict lines must not land in the JSON
  // known-bad subjects fail on purpose: only another subject's failure is one to stop at
  if (v.bail) options.stopWhen = (r) => cellFailed(r) && BUILTIN_SUBJECTS[r.cell.subject]?.catchBy === undefined;
  const reports = reportSession(str(v, "report"), str(v, "out"), { matrix: matrix.name, shard: options.shard && formatShard(options.shard) });
  const progress = v.quiet ? null : progressHooks(process.stderr, { force: v.progress === true });
  // loading the subjects and starting the workers takes a while on a cold start: say so before it
  if (progress) process.stderr.write(`preparing the ${matrix.name} matrix (loading subjects, starting workers)...\n`);
  const output = await runMatrix(matrix, options, combineHooks(progress, reports?.hooks));
  const catchBy = shownCatchBy(output.results, output.catchBy);
  printFailures(output.results.map((r) => cellJson(r) as CellJson), out, catchBy);
  out.write(`${summaryLine(output.summary)}\n`);
  if (output.stopped) out.write(`--bail: stopped at the first unexpected failure, after ${output.results.length} cells\n`);
  const whole = str(v, "filter") === undefined && str(v, "exclude") === undefined && options.shard === undefined && !output.stopped;
  // the result file and the reports are written once every section has run, so that they hold its verdict too
  const sections = whole ? await runSections(matrix.name, output.results, { out, ...(progress ? { progress: sectionProgress(process.stderr) } : {}) }, { timeoutMs: options.timeoutMs, heapMb: options.workerHeapMb, workers: options.workers }) : [];
  for (const s of sections) out.write(`${sectionSummaryText(s)}\n`);
  if (jsonPath) writeOutputFile(jsonPath, JSON.stringify(jsonReport(output.results, output.summary, output.catchBy, sections), null, 2) + "\n");
  for (const path of (await reports?.finish(output.results, output.summary, output.notes, { backend: output.backend, catchBy, sections })) ?? []) {
    process.stderr.write(`wrote ${path}\n`);
  }
  const verdict = runVerdict(output.results, sections);
  if (verdict === "NO VERDICT") out.write("NO VERDICT: nothing was judged (every check of every cell was skipped)\n");
  out.write(`${finalLine(verdict, output, sections, (performance.now() - started) / 1000)}\n`);
  return verdict === "PASS" ? 0 : 1;
}

/** The run's last line: its verdict, what it rests on (cells, sections, the golden) and the total time. */
export function finalLine(verdict: RunVerdict, output: Pick<RunOutput, "summary" | "notes" | "stopped">, sections: readonly SectionResult[], seconds: number): string {
  const s = output.summary;
  const parts = [`${s.cells} cells (${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped)${output.stopped ? ", stopped by --bail" : ""}`];
  for (const x of sections) {
    const n = sectionCounts(x);
    parts.push(`${sectionTitle(x)} ${n.asExpected} of ${n.cases} as expected`);
  }
  const golden = output.notes.filter((n) => n.startsWith("golden: "));
  parts.push(golden.length ? golden.join("; ") : "no golden compared");
  return `verdict: ${verdict}: ${parts.join("; ")}; total ${formatDuration(seconds)}`;
}

/** "8 min 26 s", "42 s". */
export function formatDuration(seconds: number): string {
  const whole = Math.round(seconds);
  return whole >= 60 ? `${Math.floor(whole / 60)} min ${whole % 60} s` : `${whole} s`;
}

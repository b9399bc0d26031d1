/**
 * The figures the README quotes (cell counts, model totals, subject counts, the mutation score),
 * computed from the code that defines them. In README.md each one sits between markers,
 * `<!--fig:NAME-->VALUE<!--/fig-->`, invisible when rendered; suites/docs.test.ts fails when a value
 * drifts from what is computed here, so a count in the README cannot go stale (issue 11).
 *
 *   npx tsx scripts/readme-figures.ts           # list the drifted figures, exit 1 if any
 *   npx tsx scripts/readme-figures.ts --write   # rewrite the values in README.md
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { usage } from "../cli/main.ts";
import { formatDuration } from "../cli/run.ts";
import { CHECK_IDS } from "../harness/checks/index.ts";
import { CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS, OPTIMIZER_KNOWN_BAD_SUBJECTS, OPTIMIZER_SUBJECTS } from "../harness/registry/registry.ts";
import { countParams } from "../harness/model/manifest.ts";
import { getModel, MODEL_NAMES } from "../harness/model/models.ts";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { ENV_VARS, OTHER_ENV_VARS, TORCH_ENV_PREFIX } from "../harness/util/env.ts";
import { TORCH_OPTION_NAMES } from "../harness/external/torch/options.ts";
import { matrixCoverage } from "../matrix/coverage.ts";
import { finalizeMatrix } from "../matrix/finalize.ts";
import { builtinMatrices, CPU_LAYOUTS } from "../matrix/index.ts";
import { loadRegressions } from "../matrix/regressions.ts";
import { resumeCases, resumeCasesFor } from "../matrix/resume.ts";
import { trainCases, trainCasesFor } from "../matrix/train.ts";
import { subjectsOf } from "../harness/run/policy.ts";
import { BUILTIN_SUBJECTS } from "../harness/registry/registry.ts";
import { headline, type HistoryData } from "./docs/history-page.ts";

export const README = fileURLToPath(new URL("../README.md", import.meta.url));
const MUTATION_DATA = fileURLToPath(new URL("../docs/mutation.json", import.meta.url));
const FP32_ACCUM_DATA = fileURLToPath(new URL("../docs/fp32-accum.json", import.meta.url));
const HISTORY_DATA = fileURLToPath(new URL("../docs/history.json", import.meta.url));
/** What `npm run main-job` (scripts/main-job.ts) measured last: the main job's and the plan example's time and memory. */
export const MAIN_JOB_DATA = fileURLToPath(new URL("../docs/main-job.json", import.meta.url));

/** The main job's measured figures, from docs/main-job.json. */
function mainJobFigures(): Record<string, string> {
  const m = JSON.parse(readFileSync(MAIN_JOB_DATA, "utf8")) as { commit: string; cores: number; loadAverageAtStart: number; mainJob: { wallSeconds: number; peakRssBytes: number }; plan: { wallSeconds: number } };
  return {
    "main-job.wall": formatDuration(m.mainJob.wallSeconds),
    "main-job.rss": `${(m.mainJob.peakRssBytes / 1e9).toFixed(1)} GB`,
    "main-job.cores": String(m.cores),
    "main-job.load": m.loadAverageAtStart.toFixed(1),
    "main-job.commit": m.commit,
    "plan.example-seconds": formatDuration(m.plan.wallSeconds),
  };
}

const MARKER = /<!--fig:([a-z0-9.-]+)-->([\s\S]*?)<!--\/fig-->/g;

const grouped = (n: number) => n.toLocaleString("en-US");

/** The README's table of environment variables: harness/util/env.ts's, so the two cannot differ. */
function envTable(): string {
  const row = (name: string, what: string) => `| \`${name}\` | ${what.replace(/\|/g, "\\|")} |`;
  return [
    "",
    "| variable | what it does |",
    "|---|---|",
    ...Object.entries(ENV_VARS).map(([k, v]) => row(k, v)),
    row(`${TORCH_ENV_PREFIX}*`, `the torch subjects' options: ${TORCH_OPTION_NAMES.map((n) => `\`${n}\``).join(", ")} (harness/external/torch/options.ts; any other name is refused)`),
    ...Object.entries(OTHER_ENV_VARS).map(([k, v]) => row(k, v)),
    "",
  ].join("\n");
}

/** The README's `plan` example: the command and the table it prints, from a run of it (the timing line left out: it is the machine's). */
export const PLAN_EXAMPLE = ["plan", "--model", "qwen3-30b-a3b", "--layout", "tp8,dp_shard2", "--dtype", "bf16", "--subject", "hf-replicate", "--subject", "bucketed", "--subject", "titan"];

function planExample(): string {
  const bin = fileURLToPath(new URL("../bin/clip-parity.js", import.meta.url));
  const out = execFileSync(process.execPath, [bin, ...PLAN_EXAMPLE], { encoding: "utf8", env: { ...process.env, CI: "" } });
  const lines = out.split("\n");
  const table = lines.slice(lines.findIndex((l) => l.startsWith("subject ")), lines.findIndex((l) => l.startsWith("stage profile")));
  return `\n\`\`\`\n$ npm run clip-parity -- ${PLAN_EXAMPLE.join(" ")}\n${table.join("\n")}\n\`\`\`\n`;
}

/** The cases the main job's train and resume sections run: every correct case's configuration with each optimizer-owned subject of the cpu matrix. */
function mainJobSections(): { train: number; resume: number } {
  const optimizer = subjectsOf(builtinMatrices().cpu!, undefined).filter((s) => BUILTIN_SUBJECTS[s]?.shape === "optimizer");
  return {
    train: optimizer.reduce((n, s) => n + trainCasesFor("cpu", s).length, 0),
    resume: optimizer.reduce((n, s) => n + resumeCasesFor("cpu", s, BUILTIN_SUBJECTS[s]!.tolerance).length, 0),
  };
}

/** docs/history.md's headline (the shipped bugs caught), from docs/history.json. */
function historyHeadline(): string {
  if (!existsSync(HISTORY_DATA)) return "No history run yet (`npm run history`)";
  return headline(JSON.parse(readFileSync(HISTORY_DATA, "utf8")) as HistoryData);
}

/** Every figure by name, as the README prints it. */
export function computeFigures(): Record<string, string> {
  const m = builtinMatrices();
  const cellsOf = (name: string) => m[name]!.cases.length * subjectsOf(m[name]!, undefined).length;
  const fin = finalizeMatrix();
  const coverage = matrixCoverage(m.cpu!);
  const mutation = JSON.parse(readFileSync(MUTATION_DATA, "utf8")) as { after: { score: number }; before: { score: number } | null };
  const accum = JSON.parse(readFileSync(FP32_ACCUM_DATA, "utf8")) as { maxRatio: number; cellsKept: number };
  const figures: Record<string, string> = {
    "cpu.layouts": String(CPU_LAYOUTS.length),
    "cpu.cases": grouped(m.cpu!.cases.length),
    "cpu.subjects": String(subjectsOf(m.cpu!, undefined).length),
    "cpu.cells": grouped(cellsOf("cpu")),
    "cpu.coverage": `${coverage.met} of ${coverage.requirements.length}`,
    "nightly.cases": grouped(m.nightly!.cases.length),
    "nightly.cells": grouped(cellsOf("nightly")),
    "gpu4.cases": grouped(m.gpu4!.cases.length),
    "regressions.cases": grouped(loadRegressions().length),
    "finalize.cases": grouped(fin.cases.length),
    "finalize.cells": grouped(fin.cases.length * subjectsOf(fin, undefined).length),
    "train.cpu": String(trainCases("cpu").length),
    "resume.cpu": String(resumeCases("cpu").length),
    "train.main-job": String(mainJobSections().train),
    "regressions.main-job": String(loadRegressions().length * subjectsOf(m.cpu!, undefined).length),
    "resume.main-job": String(mainJobSections().resume),
    "plan.default-subjects": subjectsOf({}, undefined).map((s) => `\`${s}\``).join(", "),
    "plan.example": planExample(),
    "subjects.correct": String(CORRECT_SUBJECTS.length + OPTIMIZER_SUBJECTS.length),
    "subjects.known-bad": String(KNOWN_BAD_SUBJECTS.length + OPTIMIZER_KNOWN_BAD_SUBJECTS.length),
    checks: String(CHECK_IDS.length),
    "env.table": envTable(),
    "history.headline": historyHeadline(),
    ...mainJobFigures(),
    "mutation.after": `${mutation.after.score}%`,
    "fp32-accum.max-ratio": accum.maxRatio.toFixed(3),
    "fp32-accum.cells": grouped(accum.cellsKept),
    "fp32-accum.margin": `${(Math.floor(10 / accum.maxRatio) / 10).toFixed(1)}x`,
    "mutation.before": mutation.before ? `${mutation.before.score}%` : "n/a",
    // the generated --help, between code fences (the markers stand on their own lines, outside the fence)
    "cli.usage": `\n\`\`\`\n${usage().trimEnd()}\n\`\`\`\n`,
  };
  for (const name of MODEL_NAMES) {
    const model = getModel(name);
    figures[`model.${name}`] = grouped(model.totalParams);
    const mtp = countParams(model, (p) => p.name.startsWith("mtp."));
    if (mtp > 0) figures[`model.${name}.without-mtp`] = grouped(model.totalParams - mtp);
  }
  return figures;
}

export interface FigureUse {
  name: string;
  value: string;
}

/** The figures a text quotes, in order. */
export function figuresIn(text: string): FigureUse[] {
  return [...text.matchAll(MARKER)].map((x) => ({ name: x[1]!, value: x[2]! }));
}

/** The text with every marked value replaced by the computed one; an unknown name is an error. */
export function applyFigures(text: string, figures: Record<string, string>, where = "README.md"): string {
  return text.replace(MARKER, (_all, name: string) => {
    if (!Object.hasOwn(figures, name)) throw new Error(`${where}: unknown figure "${name}"; known: ${Object.keys(figures).join(", ")}`);
    return `<!--fig:${name}-->${figures[name]}<!--/fig-->`;
  });
}

function main(): number {
  const write = process.argv.includes("--write");
  const text = readFileSync(README, "utf8");
  const figures = computeFigures();
  let next: string;
  try {
    next = applyFigures(text, figures);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    return 2;
  }
  const drifted = figuresIn(text).filter((u) => u.value !== figures[u.name]);
  for (const u of drifted) process.stdout.write(`${u.name}: README says ${u.value}, the code gives ${figures[u.name]}\n`);
  if (write && next !== text) {
    writeFileAtomic(README, next);
    process.stdout.write(`wrote ${drifted.length} figure(s) to README.md\n`);
    return 0;
  }
  if (drifted.length === 0) process.stdout.write(`README.md: ${figuresIn(text).length} figures, all current\n`);
  return drifted.length > 0 && !write ? 1 : 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main();

/**
 * The clip-parity command line. Exit status: 0 when every check passed, 1 when a check failed,
 * 2 for bad input (with a message naming the flag or file, the value and what is allowed).
 */
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { ClipParityError, InputError } from "../errors.ts";
import { CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS, BUILTIN_SUBJECTS } from "../clip/registry.ts";
import { REGIMES } from "../clip/regimes.ts";
import { CHECKS } from "../checks/index.ts";
import { getModel, MODEL_NAMES } from "../model/models.ts";
import { parseLayout } from "../layout/layout.ts";
import { BACKEND_KINDS, type BackendKind } from "../backend/backend.ts";
import { native } from "../backend/native.ts";
import { builtinMatrices, cellsOf, MATRIX_NAMES, resolveMatrix } from "../../matrix/index.ts";
import { jsonReport } from "../../reports/json.ts";
import { cellFailed, runCells, SubjectCache, type RunSummary } from "./runner.ts";
import { DTYPES, type Cell, type CellResult } from "./cell.ts";
import { progressHooks } from "./progress.ts";
import { dumpCell } from "./dump.ts";
import { planCommand } from "./plan.ts";
import { formatShard, parseShard, selectShard } from "./shard.ts";
import { goldenSession } from "./golden.ts";
import { cmdGate } from "./gate.ts";
import { cmdMerge, cmdReport } from "./merge.ts";
import { combineHooks, REPORTER_NAMES, reportSession } from "../../reports/index.ts";

const USAGE = `usage: clip-parity <command> [options]

commands:
  run       --matrix NAME|FILE [--backend cpu|cuda|meta] [--subject NAME|PATH]... [--filter TEXT] [--json FILE] [--seed N]
            [--shard I/N] [--report ${REPORTER_NAMES.join(",")}] [--out DIR] [--golden check|update|off] [--quiet]
  cell      --subject NAME|PATH --layout SPEC --model NAME --dtype f32|bf16|f16 --norm 2|1|inf|P --regime NAME
            [--max-norm X] [--seed N] [--error-if-nonfinite true|false] [--backend B] [--json FILE] [--dump DIR]
  cell      --file FUZZ_CASE.json [--subject NAME|PATH]   (a counterexample written by npm run fuzz)
  plan      --model NAME --layout SPEC --dtype f32|bf16|f16 [--subject NAME|PATH]... [--json FILE]
  manifest  --model NAME [--json]
  list      [matrices|subjects|models|checks|regimes]
  gate      --baseline FILE --results FILE [--memory-slack 5%] [--comm-slack 0%] [--md FILE]
  merge     --out FILE FILE...
  report    --results FILE [--report ${REPORTER_NAMES.join(",")}] [--out DIR] [--title TEXT]
  resume    --subject NAME|PATH --layout SPEC [--resume-layout SPEC] --model NAME --dtype f32|bf16|f16 [--steps T] [--save-at K]
            [--dir DIR] [--from-existing] [--norm P] [--regime NAME] [--seed N] [--json FILE]   (clip-parity resume --help)

exit status: 0 every check passed, 1 a check failed, 2 bad input`;

type Values = Record<string, string | boolean | string[] | undefined>;

function parse(args: string[], options: ParseArgsConfig["options"]): Values {
  try {
    return parseArgs({ args, options, allowPositionals: false, strict: true }).values as Values;
  } catch (err) {
    throw new InputError(`${(err as Error).message}\n${USAGE}`);
  }
}

function str(v: Values, flag: string, required = false): string | undefined {
  const x = v[flag];
  if (x === undefined || x === true) {
    if (required) throw new InputError(`--${flag} is required`);
    return undefined;
  }
  return String(x);
}

export function parseNorm(text: string): number {
  if (text === "inf") return Infinity;
  const p = Number(text);
  if (!Number.isFinite(p) || p <= 0) throw new InputError(`--norm: "${text}" is not 2, 1, inf or a positive number`);
  return p;
}

function parseSeed(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0) throw new InputError(`--seed: "${text}" is not a non-negative integer (at most 2^53-1)`);
  return n;
}

function parseBackend(text: string | undefined): BackendKind {
  const b = (text ?? "cpu") as BackendKind;
  if (!BACKEND_KINDS.includes(b)) throw new InputError(`--backend: "${text}" is not one of ${BACKEND_KINDS.join(", ")}`);
  return b;
}

function parseDtype(text: string): Cell["dtype"] {
  if (!(DTYPES as readonly string[]).includes(text)) throw new InputError(`--dtype: "${text}" is not one of ${DTYPES.join(", ")}`);
  return text as Cell["dtype"];
}

/** Writes a file whole or not at all. */
export function writeFileAtomic(path: string, text: string): void {
  const abs = resolve(path);
  mkdirSync(dirname(abs), { recursive: true });
  const tmp = `${abs}.tmp-${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, abs);
}

function writeJson(path: string | undefined, results: CellResult[], summary: RunSummary): void {
  if (!path) return;
  writeFileAtomic(path, JSON.stringify(jsonReport(results, summary), null, 2) + "\n");
}

function printFailures(results: CellResult[], out: NodeJS.WritableStream): void {
  for (const r of results) {
    if (!cellFailed(r)) continue;
    out.write(`FAIL ${r.id}\n`);
    for (const c of r.checks) if (c.status === "fail") out.write(`  ${c.id}: ${c.message.replace(/\n/g, "\n    ")}\n`);
  }
}

/** The closing line, in the plain "N passed, N failed" form that CI log readers recognise. */
function summaryLine(s: RunSummary): string {
  return `${s.cells} cells\ncells: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped`;
}

async function cmdRun(args: string[]): Promise<number> {
  const v = parse(args, {
    matrix: { type: "string" },
    backend: { type: "string" },
    subject: { type: "string", multiple: true },
    filter: { type: "string" },
    json: { type: "string" },
    seed: { type: "string" },
    quiet: { type: "boolean" },
    shard: { type: "string" },
    report: { type: "string" },
    out: { type: "string" },
    golden: { type: "string" },
  });
  const matrix = resolveMatrix(str(v, "matrix") ?? "cpu");
  // a cuda matrix runs on the cuda backend unless --backend says otherwise (absent CUDA: refused below)
  const backend = parseBackend(str(v, "backend") ?? (matrix.backend === "cuda" ? "cuda" : undefined));
  const shard = str(v, "shard") === undefined ? undefined : parseShard(str(v, "shard")!);
  const reports = reportSession(str(v, "report"), str(v, "out"), { matrix: matrix.name, backend, shard: shard && formatShard(shard) });
  const partial = Boolean(shard || str(v, "filter") || v.subject || str(v, "seed"));
  const golden = goldenSession({ mode: str(v, "golden"), matrix: matrix.name, backend, partial });
  if (matrix.backend === "cuda" && backend === "cuda") native(); // loads the addon before the Backend says CUDA is absent
  if (matrix.backend === "cuda" && str(v, "backend") === undefined) {
    const cuda = native().cudaStatus();
    if (!cuda.present) {
      throw new ClipParityError(
        "E_NO_CUDA",
        `matrix ${matrix.name} needs CUDA, which is not available here (${cuda.message}). ` +
          `To run the same cells on the CPU backend: clip-parity run --matrix ${matrix.name} --backend cpu`,
      );
    }
  }
  const seed = parseSeed(str(v, "seed"));
  const subjects = (v.subject as string[] | undefined) ?? matrix.subjects ?? CORRECT_SUBJECTS;
  let cells = cellsOf(matrix, subjects);
  if (seed !== undefined) cells = cells.map((c) => ({ ...c, seed }));
  cells = selectShard(cells, shard);
  const cache = new SubjectCache();
  for (const s of new Set(subjects)) await cache.get(s); // bad subject = exit 2 before anything runs
  const run = await runCells(cells, {
    backend,
    filter: str(v, "filter"),
    subjects: cache,
    budgets: matrix.budgets,
    hooks: combineHooks(v.quiet ? undefined : progressHooks(process.stderr), reports?.hooks),
    inspect: golden?.inspect,
  });
  const { results } = run;
  const { summary, notes } = golden ? golden.finish(results) : { summary: run.summary, notes: [] };
  printFailures(results, process.stdout);
  process.stdout.write(`${summaryLine(summary)}\n`);
  writeJson(str(v, "json"), results, summary);
  for (const path of (await reports?.finish(results, summary, notes)) ?? []) process.stderr.write(`wrote ${path}\n`);
  return summary.failed ? 1 : 0;
}

async function cmdCell(args: string[]): Promise<number> {
  const v = parse(args, {
    subject: { type: "string" },
    layout: { type: "string" },
    model: { type: "string" },
    dtype: { type: "string" },
    norm: { type: "string" },
    regime: { type: "string" },
    "max-norm": { type: "string" },
    seed: { type: "string" },
    "error-if-nonfinite": { type: "string" },
    backend: { type: "string" },
    json: { type: "string" },
    dump: { type: "string" },
    file: { type: "string" },
  });
  const caseFile = str(v, "file");
  if (caseFile !== undefined) {
    // A fuzz case file (harness/fuzz/case.ts): a synthetic model with explicit placements.
    const other = ["layout", "model", "dtype", "norm", "regime", "max-norm", "seed", "error-if-nonfinite", "backend", "json", "dump"].filter((f) => v[f] !== undefined);
    if (other.length) throw new InputError(`--file: the case file fixes the cell; only --subject may be given with it (got --${other.join(", --")})`);
    const { printReplay } = await import("../fuzz/replay.ts");
    return printReplay(caseFile, { subject: str(v, "subject"), memoryTable });
  }
  const model = str(v, "model", true)!;
  getModel(model);
  const regime = str(v, "regime", true)!;
  if (!(REGIMES as readonly string[]).includes(regime)) throw new InputError(`--regime: "${regime}" is not one of ${REGIMES.join(", ")}`);
  const maxNormText = str(v, "max-norm");
  const maxNorm = maxNormText === undefined ? undefined : Number(maxNormText);
  if (maxNorm !== undefined && !(maxNorm > 0)) throw new InputError(`--max-norm: "${maxNormText}" is not a positive number`);
  const errText = str(v, "error-if-nonfinite");
  if (errText !== undefined && errText !== "true" && errText !== "false") {
    throw new InputError(`--error-if-nonfinite: "${errText}" is not true or false`);
  }
  const cell: Cell = {
    subject: str(v, "subject", true)!,
    layout: parseLayout(str(v, "layout", true)!),
    model,
    dtype: parseDtype(str(v, "dtype", true)!),
    normType: parseNorm(str(v, "norm", true)!),
    regime: regime as Cell["regime"],
    seed: parseSeed(str(v, "seed")) ?? 0,
    ...(maxNorm !== undefined ? { maxNorm } : {}),
    ...(errText !== undefined ? { errorIfNonfinite: errText === "true" } : {}),
  };
  const backend = parseBackend(str(v, "backend"));
  const dumpDir = str(v, "dump");
  const cache = new SubjectCache();
  const subject = await cache.get(cell.subject);
  const { runCell } = await import("./cell.ts");
  const result = await runCell(cell, { backend, subject, inspect: dumpDir ? (ctx) => dumpCell(dumpDir, ctx) : undefined });
  const out = process.stdout;
  out.write(`${result.id}\n  norm ${result.totalNorm}  reference ${result.referenceNorm}  clip_coef ${result.clipCoef}  max_norm ${result.maxNorm}\n`);
  for (const c of result.checks) out.write(`  ${c.status.padEnd(4)} ${c.id}${c.message ? `: ${c.message.replace(/\n/g, "\n       ")}` : ""}\n`);
  out.write(memoryTable(result));
  const summary = { cells: 1, passed: cellFailed(result) ? 0 : 1, failed: cellFailed(result) ? 1 : 0, skipped: 0 };
  writeJson(str(v, "json"), [result], summary);
  return summary.failed ? 1 : 0;
}

function cmdManifest(args: string[]): number {
  const v = parse(args, { model: { type: "string" }, json: { type: "boolean" } });
  const m = getModel(str(v, "model", true)!);
  if (v.json) {
    process.stdout.write(JSON.stringify({ name: m.name, totalParams: m.totalParams, params: m.params, ties: m.ties }, null, 2) + "\n");
    return 0;
  }
  const out = process.stdout;
  out.write(`${m.name}: ${m.description}\n`);
  for (const p of m.params) out.write(`  ${String(p.index).padStart(4)}  ${p.name.padEnd(44)} ${p.kind.padEnd(9)} [${p.shape.join(", ")}]\n`);
  for (const t of m.ties) out.write(`  tie: ${t.canonical} <- ${t.replicas.map((r) => r.fqn).join(", ")}\n`);
  out.write(`total: ${m.totalParams.toLocaleString("en-US")} logical parameters (${m.totalParams})\n`);
  return 0;
}

function cmdList(args: string[]): number {
  const what = args[0] ?? "all";
  const out = process.stdout;
  const sections: Record<string, () => void> = {
    matrices: () => {
      for (const [name, m] of Object.entries(builtinMatrices())) out.write(`${name.padEnd(10)} ${String(m.cases.length).padStart(5)} cases  ${m.backend}  ${m.description}\n`);
    },
    subjects: () => {
      for (const name of [...CORRECT_SUBJECTS, ...KNOWN_BAD_SUBJECTS]) {
        const s = BUILTIN_SUBJECTS[name];
        const tag = CORRECT_SUBJECTS.includes(name) ? `passes (${s.tolerance ?? "fp32"})` : `caught by ${s.catchBy?.join(", ")}`;
        out.write(`${name.padEnd(20)} ${tag.padEnd(40)} ${s.description}\n`);
      }
    },
    models: () => {
      for (const name of MODEL_NAMES) out.write(`${name.padEnd(18)} ${getModel(name).totalParams.toLocaleString("en-US").padStart(16)}\n`);
    },
    checks: () => {
      for (const c of CHECKS) out.write(`${c.id.padEnd(18)} ${c.description}\n`);
      // Judged across a training run rather than one clip: `clip-parity resume`, not `run`.
      out.write(`${"resume.equal".padEnd(18)} a resumed run ends bitwise equal to the uninterrupted one (clip-parity resume)\n`);
    },
    regimes: () => {
      for (const r of REGIMES) out.write(`${r}\n`);
    },
  };
  if (what === "all") {
    for (const [k, f] of Object.entries(sections)) {
      out.write(`${k}:\n`);
      f();
    }
    return 0;
  }
  const f = sections[what];
  if (!f) throw new InputError(`list: "${what}" is not one of ${Object.keys(sections).join(", ")}`);
  f();
  return 0;
}

/** Per rank: gradient bytes, scratch peak against budget, the ledger's stages and collectives. */
export function memoryTable(r: CellResult): string {
  const fmt = (n: number) => n.toLocaleString("en-US");
  const stageNames = [...new Set(r.memory.flatMap((m) => m.stages.map((s) => s.stage)))];
  const onDevice = r.memory.some((m) => m.stages.some((s) => s.deviceFreeBytes !== undefined));
  const head = ["rank", "grads", "scratch peak", "budget", ...stageNames.map((s) => `${s} (live/peak${onDevice ? "; device free/total" : ""})`), "collectives", "comm bytes"];
  const rows = r.memory.map((m) => [
    String(m.rank),
    fmt(m.gradBytes),
    fmt(m.scratchPeakBytes),
    fmt(m.budgetBytes),
    ...stageNames.map((name) => {
      const s = m.stages.find((x) => x.stage === name);
      if (!s) return "-";
      const dev = s.deviceFreeBytes !== undefined ? `; ${fmt(s.deviceFreeBytes)}/${fmt(s.deviceTotalBytes ?? 0)}` : "";
      return `${fmt(s.liveBytes)}/${fmt(s.peakBytes)}${dev}`;
    }),
    String(r.comm[m.rank].calls),
    fmt(r.comm[m.rank].bytes),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) => `  ${cells.map((c, i) => c.padStart(widths[i])).join("  ")}\n`;
  return `  memory (bytes) and collectives per rank:\n${line(head)}${rows.map(line).join("")}`;
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "run":
        return await cmdRun(rest);
      case "cell":
        return await cmdCell(rest);
      case "plan":
        return await planCommand(rest);
      case "manifest":
        return cmdManifest(rest);
      case "list":
        return cmdList(rest);
      case "gate":
        return await cmdGate(rest);
      case "merge":
        return await cmdMerge(rest);
      case "report":
        return await cmdReport(rest);
      case "resume":
        return await (await import("../resume/cli.ts")).cmdResume(rest);
      case undefined:
      case "help":
      case "--help":
      case "-h":
        process.stdout.write(`${USAGE}\n`);
        return command === undefined ? 2 : 0;
      default:
        throw new InputError(`unknown command "${command}"; one of run, cell, plan, manifest, list, gate, merge, report, resume\n${USAGE}`);
    }
  } catch (err) {
    if (err instanceof ClipParityError) {
      process.stderr.write(`clip-parity: ${err.message}\n`);
      return err.exitCode;
    }
    throw err;
  }
}

export { MATRIX_NAMES };

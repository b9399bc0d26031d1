/**
 * `clip-parity train`: training parity across layouts (SPEC §9): the same T AdamW updates from the
 * same initial state in every layout given, compared bitwise after every step across the layouts and
 * between tied copies (harness/training/train-parity.ts, docs/train.md). Or a matrix's train section.
 * Exit status: 0 parity, 1 a difference (first step, tensor, element, both values), 2 bad input.
 */
import { InputError } from "../harness/errors.ts";
import { parseLayout } from "../harness/layout/layout.ts";
import { getModel } from "../harness/model/models.ts";
import { subjectInfo, type IsolatedOptions } from "../harness/sandbox/isolated.ts";
import { trainIsolated } from "../harness/training/jobs.ts";
import { DEFAULT_TIMEOUT_MS } from "../harness/sandbox/pool.ts";
import { ALL_REGIMES, type Regime } from "../harness/gradients/regimes.ts";
import { DTYPES } from "../harness/cell/cell.ts";
import { ADAMW } from "../harness/training/adamw.ts";
import { INIT_MODES, type InitMode } from "../harness/training/train.ts";
import { DEFAULT_TRAIN_STEPS, trainId, validateTrainCell, type TrainCell, type TrainResult } from "../harness/training/train-parity.ts";
import { assertWritableFile } from "../harness/util/fs.ts";
import { assertOnlyJsonWithMatrix, given, list, parseChoice, parseCommandLine, parseInteger, parseNormType, str, type CommandSpec } from "./args.ts";
import { finishOneCase, runSection, sectionExitCode, type SectionIO } from "./section.ts";
import type { SectionResult } from "../harness/results/sections.ts";

export const spec: CommandSpec = {
  name: "train",
  summary:
    `Trains T steps (SPEC §5 gradients, the subject's clip, AdamW lr ${ADAMW.lr}, float32 state) in every layout from the same initial ` +
    "state and checks train.parity after the initial sync and after every step: tied copies bitwise equal in each layout, and every " +
    "parameter, exp_avg, exp_avg_sq and step count bitwise equal across the layouts (exact subjects; docs/train.md for fp32-class ones).",
  flags: {
    layouts: { type: "string", multiple: true, value: "SPEC", description: "layouts to compare: --layouts A B ... (or --layouts A --layouts B)" },
    model: { type: "string", value: "NAME", description: "clip-parity list models", default: "deepseek-v3-debug" },
    subject: { type: "string", value: "NAME|PATH", description: "the subject whose clip (and afterInit) the training uses", default: "exact" },
    regime: { type: "string", value: "NAME", description: "gradient regime", default: "finalize" },
    dtype: { type: "string", value: "f32|bf16|f16", description: "gradient dtype (parameters and optimizer state are float32)", default: "f32" },
    steps: { type: "string", value: "T", description: "training steps", default: String(DEFAULT_TRAIN_STEPS) },
    norm: { type: "string", value: "2|1|inf|P", description: "the clip's norm type", default: "2" },
    init: { type: "string", value: INIT_MODES.join("|"), description: "initial values: per PP stage (tied copies start different) or the same everywhere", default: "per-stage" },
    seed: { type: "string", value: "N", description: "generator seed", default: "0" },
    "timeout-s": { type: "string", value: "S", description: "wall-clock limit of one subject phase (a clip, an afterInit) in seconds", default: String(DEFAULT_TIMEOUT_MS / 1000) },
    json: { type: "string", value: "FILE", description: "write the result as JSON" },
    matrix: { type: "string", value: "NAME", description: "run the train section of a matrix (cpu): correct cells must pass, known-bad ones fail; with --subject, every correct cell's configuration with that subject" },
  },
  positionals: "[SPEC...]",
  notes: "layouts may follow --layouts separated by spaces: --layouts pp2,dp_shard2,ep2 pp4\nexit status: 0 parity, 1 a difference, 2 bad input",
};

export async function run(argv: string[]): Promise<number> {
  const { values: v, positionals } = parseCommandLine(spec, argv);
  const s = (k: string) => str(v, k);
  const jsonPath = s("json");
  if (jsonPath !== undefined) assertWritableFile(jsonPath, "--json");
  const timeoutMs = parseInteger(s("timeout-s")!, "--timeout-s", { min: 1, max: 86_400 }) * 1000;
  const matrix = s("matrix");
  if (matrix !== undefined) {
    assertOnlyJsonWithMatrix(v, positionals, "train");
    return sectionExitCode(await runTrainMatrix(matrix, jsonPath, given(v, "subject") ? s("subject") : undefined, {}, { timeoutMs }));
  }
  const layoutTexts = [...(list(v, "layouts") ?? []), ...positionals];
  if (list(v, "layouts") === undefined) {
    throw new InputError(positionals.length ? `train: "${positionals[0]}" is not a flag; layouts follow --layouts` : "train: --layouts is required (e.g. --layouts pp2,dp_shard2,ep2 pp4)");
  }
  const model = s("model")!;
  getModel(model);
  const cell: TrainCell = {
    subject: s("subject")!,
    layouts: layoutTexts.map((t) => parseLayout(t)),
    model,
    dtype: parseChoice(s("dtype")!, "--dtype", DTYPES),
    normType: parseNormType(s("norm")!),
    regime: parseChoice(s("regime")!, "--regime", ALL_REGIMES) as Regime,
    seed: parseInteger(s("seed")!, "--seed"),
    steps: parseInteger(s("steps")!, "--steps", { min: 1, max: 1000 }),
    init: parseChoice(s("init")!, "--init", INIT_MODES) as InitMode,
  };
  validateTrainCell(cell);
  const [o] = await trainIsolated([cell], { timeoutMs });
  return finishOneCase("train", trainId(cell), o!, jsonPath, printResult, (r) => [r.check], (check) => ({ id: trainId(cell), check }));
}

/** A matrix's train section; with a subject, every correct case's configuration with that subject. */
export async function runTrainMatrix(
  name: string,
  jsonPath: string | undefined,
  subject?: string,
  io: SectionIO = {},
  isolated: IsolatedOptions = {},
): Promise<SectionResult> {
  const { trainCases, trainCasesFor, trainSections } = await import("../matrix/train.ts");
  if (subject !== undefined) await subjectInfo(subject); // bad input (no such subject, a module that does not load) is exit 2 first
  return runSection<ReturnType<typeof trainCases>[number], TrainResult>(
    {
      kind: "train",
      matrix: name,
      cases: subject === undefined ? trainCases(name) : trainCasesFor(name, subject),
      sections: Object.keys(trainSections()),
      runAll: (cases) => trainIsolated(cases, isolated),
      idOf: trainId,
      checkOf: (r) => r.check,
      ...(subject !== undefined ? { subject } : {}),
      ...io,
    },
    jsonPath,
  );
}

function printResult(r: TrainResult, out: NodeJS.WritableStream): void {
  out.write(`${r.id}\n  subject ${r.subjectName} (${r.tolerance}), regime ${r.cell.regime}, init ${r.cell.init}, ${r.cell.steps} steps\n`);
  for (const l of r.layouts) {
    const last = l.norms.length ? `, norm at step ${l.norms.length}: ${l.norms[l.norms.length - 1]}` : "";
    out.write(`  ${l.layout.padEnd(22)} world ${String(l.world).padStart(2)}  ${(l.ms / 1000).toFixed(2)} s${last}\n`);
  }
  out.write(`  comparisons ${(r.compareMs / 1000).toFixed(2)} s; total ${(r.durationMs / 1000).toFixed(2)} s\n`);
  for (const n of r.notes.slice(0, 3)) out.write(`  note: ${n}\n`);
  out.write(`  ${r.check.status.padEnd(4)} ${r.check.id}: ${r.check.message.replace(/\n/g, "\n       ")}\n`);
}

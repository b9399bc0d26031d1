/**
 * `clip-parity resume`: one resume cell, or a matrix's resume section. Exit status as for `run`: 0 the
 * check passed (or was skipped), 1 it failed, 2 bad input, a refused checkpoint included.
 */
import { InputError } from "../harness/errors.ts";
import { parseLayout, formatLayout } from "../harness/layout/layout.ts";
import { getModel } from "../harness/model/models.ts";
import { subjectInfo, type IsolatedOptions } from "../harness/sandbox/isolated.ts";
import { resumeIsolated } from "../harness/training/jobs.ts";
import { DEFAULT_TIMEOUT_MS } from "../harness/sandbox/pool.ts";
import { ALL_REGIMES, type Regime } from "../harness/gradients/regimes.ts";
import { DTYPES, formatNorm } from "../harness/cell/cell.ts";
import { ADAMW } from "../harness/training/adamw.ts";
import { readIndex } from "../harness/training/checkpoint.ts";
import { LOADER_NAMES } from "../harness/training/loaders.ts";
import { INIT_MODES, type InitMode } from "../harness/training/train.ts";
import { DEFAULT_STEPS, resumeCellId, validateResumeCell, type ResumeCell, type ResumeResult } from "../harness/training/resume.ts";
import { assertWritableFile } from "../harness/util/fs.ts";
import { assertOnlyJsonWithMatrix, given, parseChoice, parseCommand, parseInteger, parseNormType, str, type CommandSpec } from "./args.ts";
import { finishOneCase, runSection, sectionExitCode, type SectionIO } from "./section.ts";
import type { SectionResult } from "../harness/results/sections.ts";

export const spec: CommandSpec = {
  name: "resume",
  summary:
    `Trains T steps (SPEC §5 gradients, the subject's clip, AdamW lr ${ADAMW.lr}, betas (${ADAMW.beta1}, ${ADAMW.beta2}), eps ${ADAMW.eps}, ` +
    `weight_decay ${ADAMW.weightDecay}, float32 state), checkpoints after step K, resumes (in the same or another layout) and checks ` +
    "resume.equal: parameters, optimizer state and step counts bitwise equal to the uninterrupted run's.",
  flags: {
    subject: { type: "string", value: "NAME|PATH", description: "the subject whose clip the training uses" },
    layout: { type: "string", value: "SPEC", description: "layout of the uninterrupted run (with --from-existing: the checkpoint's)" },
    "resume-layout": { type: "string", value: "SPEC", description: "layout that resumes (default: --layout)" },
    model: { type: "string", value: "NAME", description: "clip-parity list models" },
    dtype: { type: "string", value: "f32|bf16|f16", description: "gradient dtype (parameters and optimizer state are float32)" },
    steps: { type: "string", value: "T", description: "training steps in all", default: String(DEFAULT_STEPS) },
    "save-at": { type: "string", value: "K", description: "checkpoint after step K", defaultText: "T/2 (with --from-existing: the checkpoint's step)" },
    norm: { type: "string", value: "2|1|inf|P", description: "the clip's norm type", default: "2" },
    regime: { type: "string", value: "NAME", description: "gradient regime", default: "active" },
    seed: { type: "string", value: "N", description: "generator seed", default: "0" },
    dir: { type: "string", value: "DIR", description: "keep the checkpoint in DIR (format: docs/checkpoint.md); default a temporary folder" },
    "from-existing": { type: "boolean", description: "resume from the checkpoint already in --dir; one that does not match the cell is refused (exit 2)" },
    init: { type: "string", value: INIT_MODES.join("|"), description: "initial values of the uninterrupted run (train: docs/train.md)", defaultText: "same" },
    loader: { type: "string", value: LOADER_NAMES.join("|"), description: "a known-bad loader that resume.equal must catch", default: "correct" },
    "timeout-s": { type: "string", value: "S", description: "wall-clock limit of one subject phase (a clip, an afterInit) in seconds", default: String(DEFAULT_TIMEOUT_MS / 1000) },
    json: { type: "string", value: "FILE", description: "write the result as JSON" },
    matrix: { type: "string", value: "NAME", description: "run the resume section of a matrix (cpu): correct cells must pass, known-bad loaders fail; with --subject, every correct cell's configuration with that subject" },
  },
  notes: "exit status: 0 passed (or skipped), 1 resume.equal failed, 2 bad input or a refused checkpoint",
};

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const s = (k: string) => str(v, k);
  const jsonPath = s("json");
  if (jsonPath !== undefined) assertWritableFile(jsonPath, "--json");
  const timeoutMs = parseInteger(s("timeout-s")!, "--timeout-s", { min: 1, max: 86_400 }) * 1000;
  const matrix = s("matrix");
  if (matrix !== undefined) {
    assertOnlyJsonWithMatrix(v, [], "resume");
    return sectionExitCode(await runResumeMatrix(matrix, jsonPath, given(v, "subject") ? s("subject") : undefined, {}, { timeoutMs }));
  }
  const fromExisting = v["from-existing"] === true;
  const dir = s("dir");
  if (fromExisting && !dir) throw new InputError("--from-existing needs --dir: the directory of the checkpoint to resume from");
  // with --from-existing, the checkpoint's own layout and step are the defaults
  const existing = fromExisting ? readIndex(dir!) : undefined;
  const need = (k: string): string => {
    const x = s(k);
    if (x === undefined) throw new InputError(`resume: --${k} is required`);
    return x;
  };
  const model = need("model");
  getModel(model);
  const loader = parseChoice(s("loader")!, "--loader", LOADER_NAMES);
  const layout = parseLayout(s("layout") ?? existing?.layoutSpec ?? need("layout"));
  const steps = parseInteger(s("steps")!, "--steps", { min: 1, max: 1000 });
  const saveAt = s("save-at") !== undefined ? parseInteger(s("save-at")!, "--save-at") : (existing?.step ?? Math.floor(steps / 2));
  const resumeText = s("resume-layout");
  const cell: ResumeCell = {
    subject: need("subject"),
    layout,
    ...(resumeText !== undefined ? { resumeLayout: parseLayout(resumeText) } : {}),
    model,
    dtype: parseChoice(need("dtype"), "--dtype", DTYPES),
    normType: parseNormType(s("norm")!),
    regime: parseChoice(s("regime")!, "--regime", ALL_REGIMES) as Regime,
    seed: parseInteger(s("seed")!, "--seed"),
    steps,
    saveAt,
    ...(loader !== "correct" ? { loader } : {}),
    ...(s("init") !== undefined ? { init: parseChoice(s("init")!, "--init", INIT_MODES) as InitMode } : {}),
  };
  validateResumeCell(cell);
  const [o] = await resumeIsolated([{ cell, dir, fromExisting }], { timeoutMs });
  return finishOneCase("resume", resumeCellId(cell), o!, jsonPath, printResult, (r) => r.checks, (check) => ({ id: resumeCellId(cell), checks: [check] }));
}

/** A matrix's resume section; with a subject, every correct case's configuration with that subject. */
export async function runResumeMatrix(
  name: string,
  jsonPath: string | undefined,
  subject?: string,
  io: SectionIO = {},
  isolated: IsolatedOptions = {},
): Promise<SectionResult> {
  const { resumeCases, resumeCasesFor, resumeSections } = await import("../matrix/resume.ts");
  const info = subject === undefined ? undefined : await subjectInfo(subject); // bad input is exit 2 first
  return runSection<ReturnType<typeof resumeCases>[number], ResumeResult>(
    {
      kind: "resume",
      matrix: name,
      cases: subject === undefined ? resumeCases(name) : resumeCasesFor(name, subject, info?.tolerance),
      sections: Object.keys(resumeSections()),
      runAll: async (cases) => resumeIsolated(cases.map((cell) => ({ cell })), isolated),
      idOf: resumeCellId,
      checkOf: (r) => r.checks[0]!,
      ...(subject !== undefined ? { subject } : {}),
      ...io,
    },
    jsonPath,
  );
}

function printResult(r: ResumeResult, out: NodeJS.WritableStream): void {
  const c = r.cell;
  out.write(`${r.id}\n`);
  out.write(
    `  checkpoint after step ${r.checkpoint.step} of ${c.steps} from ${r.checkpoint.layout}: ${r.checkpoint.files} files, ` +
      `${r.checkpoint.bytes.toLocaleString("en-US")} bytes${r.checkpoint.dir ? ` in ${r.checkpoint.dir}` : ""}\n`,
  );
  out.write(`  resumed in ${formatLayout(c.resumeLayout ?? c.layout)}; norm ${formatNorm(c.normType)}, regime ${c.regime}, ${r.durationMs.toFixed(0)} ms\n`);
  for (const n of r.norms) out.write(`  step ${String(n.step).padStart(3)}  norm ${n.resumed}  uninterrupted ${n.uninterrupted}\n`);
  for (const k of r.checks) out.write(`  ${k.status.padEnd(4)} ${k.id}${k.message ? `: ${k.message.replace(/\n/g, "\n       ")}` : ""}\n`);
}

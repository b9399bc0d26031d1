/**
 * One resume cell (SPEC §9): run T steps uninterrupted in `layout`, writing a sharded checkpoint
 * after step k; resume from that checkpoint in `resumeLayout` (the same layout, or another one:
 * resharding) and run steps k+1..T; the check `resume.equal` passes when every parameter, exp_avg,
 * exp_avg_sq and optimizer step count of every physical copy equals the uninterrupted run's bitwise
 * (and so does every step's total norm).
 *
 * Bitwise equality across layouts is required only of subjects that claim the `exact` tolerance:
 * for any other subject a difference after a change of layout is reported as `skip`, with the
 * difference, since its norm may legitimately depend on the partition.
 */
import { commandLine } from "../util/shell.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { scratchRoot } from "../util/scratch.ts";
import { join, resolve } from "node:path";
import type { Subject } from "../subject/api.ts";
import { Backend } from "../backend/backend.ts";
import { formatLayout, sameLayout, validateLayout, worldSize, type Layout } from "../layout/layout.ts";
import { getModel } from "../model/models.ts";
import { refusePartialGradients } from "../model/manifest.ts";
import { ALL_REGIMES } from "../gradients/regimes.ts";
import { InputError } from "../errors.ts";
import { fail, pass, skip, type CheckResult } from "../checks/types.ts";
import { DTYPES, formatNorm } from "../cell/cell.ts";
import { ADAMW } from "./adamw.ts";
import { readCheckpoint, saveCheckpoint, type CheckpointIndex } from "./checkpoint.ts";
import { loaderNamed } from "./loaders.ts";
import type { StateDiff } from "../judge/state-compare.ts";
import { currentJudge } from "../judge/client.ts";
import { sharedState } from "../judge/states.ts";
import { afterInit, freeGrads, freeState, initState, INIT_MODES, trainSteps, TrainingError, type InitMode, type TrainConfig, type TrainingCase } from "./train.ts";
import type { TrainState } from "../judge/train-state.ts";

export const RESUME_CHECK = "resume.equal";
export const DEFAULT_STEPS = 6;

export interface ResumeCell extends TrainingCase {
  /** The layout of the uninterrupted run, which writes the checkpoint. */
  layout: Layout;
  /** The layout that resumes (default: `layout`). */
  resumeLayout?: Layout;
  /** k: the checkpoint is written after step k (0 <= k <= T). */
  saveAt: number;
  /** A loader by name (harness/training/loaders.ts): a known-bad one for the suite's negative cells (default "correct"). */
  loader?: string;
  /**
   * Initial values of the uninterrupted run (default "same"): "per-stage" seeds each PP stage's tied
   * replica differently; the subject's afterInit (or the harness, for a plain clip subject) syncs them.
   */
  init?: InitMode;
}

export interface ResumeResult {
  id: string;
  cell: ResumeCell;
  subjectName: string;
  tolerance: string;
  checks: CheckResult[];
  checkpoint: { dir: string | null; files: number; bytes: number; step: number; layout: string };
  /** Total norms (rank 0) of the steps the resumed run ran, beside the uninterrupted run's. */
  norms: { step: number; uninterrupted: number; resumed: number }[];
  compared: { tensors: number; elements: number };
  repro: string;
  durationMs: number;
}

export interface ResumeOptions {
  subject: Subject;
  /** Keep the checkpoint in this directory (default: a temporary directory, removed afterwards). */
  dir?: string;
  /** Do not run the first run's checkpointing: resume from the checkpoint already in `dir`. */
  fromExisting?: boolean;
  /**
   * A scratch folder the caller owns and removes (the main thread, for a worker's job: harness/util/scratch.ts),
   * used instead of a temporary folder of this thread's own when `dir` is not given.
   */
  scratchDir?: string;
  /** Wall-clock limit of each step's clip, in ms. */
  timeoutMs?: number;
}

export function resumeLayoutOf(c: ResumeCell): Layout {
  return c.resumeLayout ?? c.layout;
}

export function resumeCellId(c: ResumeCell): string {
  const parts = [
    c.subject,
    `${formatLayout(c.layout)}->${formatLayout(resumeLayoutOf(c))}`,
    c.model,
    c.dtype,
    `n${formatNorm(c.normType)}`,
    c.regime,
    `s${c.seed}`,
    `T${c.steps}`,
    `k${c.saveAt}`,
  ];
  if (c.loader && c.loader !== "correct") parts.push(`loader-${c.loader}`);
  if (c.init && c.init !== "same") parts.push(`init-${c.init}`);
  return parts.join("/");
}

export function resumeRepro(c: ResumeCell, dir?: string): string {
  const args: (string | number)[] = ["--subject", c.subject, "--layout", formatLayout(c.layout)];
  if (c.resumeLayout && !sameLayout(c.resumeLayout, c.layout)) args.push("--resume-layout", formatLayout(c.resumeLayout));
  args.push("--model", c.model, "--dtype", c.dtype, "--norm", formatNorm(c.normType), "--regime", c.regime, "--seed", c.seed);
  args.push("--steps", c.steps, "--save-at", c.saveAt);
  if (c.loader && c.loader !== "correct") args.push("--loader", c.loader);
  if (c.init && c.init !== "same") args.push("--init", c.init);
  if (dir) args.push("--dir", dir);
  return commandLine("npx clip-parity resume", args);
}

/** Refuses a cell that cannot run (exit status 2), naming the field and the value. */
export function validateResumeCell(c: ResumeCell): void {
  validateLayout(c.layout);
  validateLayout(resumeLayoutOf(c));
  refusePartialGradients(getModel(c.model), "--model");
  if (!DTYPES.includes(c.dtype)) throw new InputError(`dtype: "${c.dtype}" is not one of ${DTYPES.join(", ")}`);
  if (!(c.normType > 0)) throw new InputError(`norm: ${c.normType} must be a positive number or inf`);
  if (!(ALL_REGIMES as readonly string[]).includes(c.regime)) throw new InputError(`regime: "${c.regime}" is not one of ${ALL_REGIMES.join(", ")}`);
  if (!Number.isSafeInteger(c.seed) || c.seed < 0) throw new InputError(`seed: ${c.seed} must be a non-negative integer`);
  if (!Number.isSafeInteger(c.steps) || c.steps < 1 || c.steps > 1000) throw new InputError(`steps: ${c.steps} must be an integer from 1 to 1000`);
  if (!Number.isSafeInteger(c.saveAt) || c.saveAt < 0 || c.saveAt > c.steps) {
    throw new InputError(`save-at: ${c.saveAt} must be an integer from 0 to steps (${c.steps})`);
  }
  if (c.loader !== undefined) loaderNamed(c.loader);
  if (c.init !== undefined && !INIT_MODES.includes(c.init)) throw new InputError(`init: "${String(c.init)}" is not one of ${INIT_MODES.join(", ")}`);
}

const sameBits = (a: number, b: number) => Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b));

export async function runResume(cell: ResumeCell, options: ResumeOptions): Promise<ResumeResult> {
  const started = performance.now();
  validateResumeCell(cell);
  const subject = options.subject;
  const model = getModel(cell.model);
  const layoutA = validateLayout(cell.layout);
  const layoutB = validateLayout(resumeLayoutOf(cell));
  if (options.fromExisting && !options.dir) throw new InputError("--from-existing needs --dir: the directory of the checkpoint to resume from");
  const tolerance = subject.tolerance ?? "fp32";
  const cfg: TrainConfig = { subject, model, dtype: cell.dtype, normType: cell.normType, regime: cell.regime, seed: cell.seed, timeoutMs: options.timeoutMs, init: cell.init };
  const dir = options.dir ? resolve(options.dir) : (options.scratchDir ?? mkdtempSync(join(scratchRoot(), "clip-parity-resume-")));
  const repro = resumeRepro(cell, options.dir);
  const backend = new Backend("cpu", Math.max(worldSize(layoutA), worldSize(layoutB)));
  const expect = { model, dtype: cell.dtype, seed: cell.seed, layout: layoutA, step: cell.saveAt, normType: cell.normType, regime: cell.regime };
  let uninterrupted: TrainState | undefined;
  let resumed: TrainState | undefined;
  let index: CheckpointIndex | undefined;
  let check: CheckResult;
  const norms: ResumeResult["norms"] = [];
  const compared = { tensors: 0, elements: 0 };
  try {
    // 1. a checkpoint given to resume from is validated before anything runs
    if (options.fromExisting) index = readCheckpoint(backend, dir, expect);
    // 2. the uninterrupted run, checkpointing after step k
    let phase = "uninterrupted run";
    try {
      uninterrupted = initState(backend, layoutA, cfg);
      await afterInit(backend, uninterrupted, cfg); // the tie sync after init (a no-op on values with init "same")
      if (!options.fromExisting && cell.saveAt === 0) {
        saveCheckpoint(backend, uninterrupted, dir, { ...cfg, subject: subject.name, model });
      }
      if (!options.fromExisting && cell.saveAt > 0) {
        await trainSteps(backend, uninterrupted, cfg, cell.saveAt);
        saveCheckpoint(backend, uninterrupted, dir, { ...cfg, subject: subject.name, model });
      }
      await trainSteps(backend, uninterrupted, cfg, cell.steps);
      freeGrads(backend, uninterrupted);
      // 3. resume: validate everything, then build a fresh model and optimizer and load
      index ??= readCheckpoint(backend, dir, expect);
      phase = `run resumed at step ${index.step}`;
      resumed = initState(backend, layoutB, cfg);
      loaderNamed(cell.loader ?? "correct").load(backend, dir, index, resumed);
      await trainSteps(backend, resumed, cfg, cell.steps);
      freeGrads(backend, resumed);
    } catch (err) {
      if (!(err instanceof TrainingError)) throw err;
      check = fail(RESUME_CHECK, `the ${phase} could not complete: ${err.message}\n  reproduce: ${repro}`);
      return finish();
    }
    // 4. compare
    for (let t = cell.saveAt + 1; t <= cell.steps; t++) {
      norms.push({ step: t, uninterrupted: uninterrupted.norms.get(t)!, resumed: resumed.norms.get(t)! });
    }
    // judged in the judge's realm (harness/judge/states.ts): the subject's thread cannot reach the comparison
    const [diff] = (await currentJudge().states({ backend: backend.kind, ranks: backend.ranks, states: [sharedState(uninterrupted), sharedState(resumed)], tied: [], pairs: [{ expected: 0, actual: 1, limit: 8 }] }, backend)).pairs as [StateDiff];
    compared.tensors = diff.tensors;
    compared.elements = diff.elements;
    const normDiffs = norms.filter((n) => !sameBits(n.uninterrupted, n.resumed));
    const where = `resumed at step ${cell.saveAt} of ${cell.steps} in ${formatLayout(layoutB)} from a checkpoint written in ${formatLayout(layoutA)}`;
    if (diff.count === 0 && normDiffs.length === 0) {
      check = pass(RESUME_CHECK, `${diff.tensors} tensors (${diff.elements} elements) and every optimizer step count bitwise equal; ${where}`);
    } else {
      const lines = [
        ...normDiffs.map((n) => `step ${n.step}: total norm ${n.resumed} after resuming; uninterrupted run: ${n.uninterrupted}`),
        ...diff.differences,
      ];
      const more = diff.count + normDiffs.length - lines.length;
      const body = `${diff.count} of ${diff.tensors} tensors or step counts differ, ${normDiffs.length} step norms differ; ${where}:\n  ${lines.join("\n  ")}${more > 0 ? `\n  ... and ${more} more` : ""}`;
      if (!sameLayout(layoutA, layoutB) && tolerance !== "exact") {
        check = skip(RESUME_CHECK, `subject ${subject.name} claims ${tolerance}: bitwise equality after a change of layout is required only of exact subjects. ${body}`);
      } else {
        check = fail(RESUME_CHECK, `${body}\n  reproduce: ${repro}`);
      }
    }
    return finish();
  } finally {
    if (uninterrupted) freeState(backend, uninterrupted);
    if (resumed) freeState(backend, resumed);
    backend.freeAll();
    if (!options.dir) rmSync(dir, { recursive: true, force: true });
  }

  function finish(): ResumeResult {
    return {
      id: resumeCellId(cell),
      cell,
      subjectName: subject.name,
      tolerance,
      checks: [check],
      checkpoint: {
        dir: options.dir ? dir : null,
        files: index?.files.length ?? 0,
        bytes: index?.files.reduce((a, f) => a + f.bytes, 0) ?? 0,
        step: index?.step ?? cell.saveAt,
        layout: index?.layoutSpec ?? formatLayout(layoutA),
      },
      norms,
      compared,
      repro,
      durationMs: performance.now() - started,
    };
  }
}

export { ADAMW };

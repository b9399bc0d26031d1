/**
 * Training parity across layouts (SPEC §9, `clip-parity train`): the same T AdamW updates from the
 * same initial state in two or more layouts, run in lockstep in one backend. After the initial
 * synchronization (step 0) and after every step t, every state is compared:
 *
 * - between tied copies, in every layout: each replica's parameter, exp_avg, exp_avg_sq and step
 *   count against its canonical copy's same block, bitwise (a trainer that skips the sync of tied
 *   copies after per-stage init, or scales a replica differently, fails here);
 * - across layouts: every physical copy of each layout against the first layout's (blocks assembled
 *   natively from its shards), bitwise. Required for subjects that claim `exact`; for fp32/bf16-class
 *   subjects a cross-layout difference is reported, not failed (their norm legitimately depends on
 *   the reduction order), while each step's norm must agree across layouts within the class.
 *
 * The first difference is reported as step, layout, tensor, element and both values.
 */
import { commandLine } from "../util/shell.ts";
import type { Subject, ToleranceClass } from "../subject/api.ts";
import { Backend } from "../backend/backend.ts";
import { fail, normTolerance, pass, sameNorm, type CheckResult } from "../checks/types.ts";
import { formatLayout, validateLayout, worldSize, type Layout } from "../layout/layout.ts";
import { getModel } from "../model/models.ts";
import { countParams, refusePartialGradients, type ModelManifest } from "../model/manifest.ts";
import type { LocalParam } from "../model/plan.ts";
import { regimeSpec } from "../gradients/regimes.ts";
import { InputError } from "../errors.ts";
import { formatNorm } from "../cell/cell.ts";
import { show } from "../judge/state-compare.ts";
import { currentJudge } from "../judge/client.ts";
import { sharedState } from "../judge/states.ts";
import { afterInit, freeState, INIT_MODES, initState, trainSteps, TrainingError, type InitMode, type TrainConfig, type TrainingCase } from "./train.ts";
import type { TrainState } from "../judge/train-state.ts";

export const TRAIN_CHECK = "train.parity";
export const DEFAULT_TRAIN_STEPS = 10;

export interface TrainCell extends TrainingCase {
  /** Two or more layouts (one is allowed: then only tied copies are compared). */
  layouts: Layout[];
  init: InitMode;
}

export interface TrainLayoutRun {
  layout: string;
  world: number;
  /** Wall time of this layout's init, sync and steps (comparisons not included). */
  ms: number;
  /** Rank 0's total norm at each step 1..T (as far as it ran). */
  norms: number[];
}

export interface TrainResult {
  id: string;
  cell: TrainCell;
  subjectName: string;
  tolerance: ToleranceClass;
  check: CheckResult;
  layouts: TrainLayoutRun[];
  /** Steps after which every comparison was made (0 = the initial state). */
  stepsCompared: number;
  /** Cross-layout differences tolerated for a non-exact subject (first one per step), if any. */
  notes: string[];
  durationMs: number;
  compareMs: number;
}

export function trainId(c: TrainCell): string {
  return `train/${c.subject}/${c.layouts.map((l) => formatLayout(validateLayout(l))).join("+")}/${c.model}/${c.dtype}/n${formatNorm(c.normType)}/${c.regime}/s${c.seed}/t${c.steps}/${c.init}`;
}

export function trainRepro(c: TrainCell): string {
  const layouts = c.layouts.map((l) => formatLayout(validateLayout(l)));
  const args = ["--subject", c.subject, "--layouts", ...layouts, "--model", c.model, "--dtype", c.dtype, "--norm", formatNorm(c.normType)];
  return commandLine("clip-parity train", [...args, "--regime", c.regime, "--seed", c.seed, "--steps", c.steps, "--init", c.init]);
}


/** Refuses a cell that cannot run or could only pass vacuously (exit status 2), naming the field and the value. */
export function validateTrainCell(c: TrainCell): void {
  if (!Array.isArray(c.layouts) || c.layouts.length === 0) throw new InputError("--layouts: give two or more distinct layouts to compare");
  const distinct = new Set(c.layouts.map((l) => formatLayout(validateLayout(l))));
  if (distinct.size < 2) {
    throw new InputError(`--layouts: ${[...distinct].join(", ")}: training parity compares two or more distinct layouts; ${distinct.size} given (${c.layouts.length} listed)`);
  }
  refusePartialGradients(getModel(c.model), "--model");
  regimeSpec(c.regime);
  if (!Number.isInteger(c.steps) || c.steps < 1 || c.steps > 1000) throw new InputError(`--steps: ${c.steps} must be an integer in [1, 1000]`);
  if (!INIT_MODES.includes(c.init)) throw new InputError(`--init: "${String(c.init)}" is not one of ${INIT_MODES.join(", ")}`);
}

export interface TrainOptions {
  subject: Subject;
  timeoutMs?: number;
  /**
   * A model given explicitly instead of the built-in `cell.model`, with each layout's plan (index =
   * layout, then rank): a fuzz case's synthetic model and placements. Its caller has validated the
   * case (harness/fuzz/case.ts), and may give a single layout (then only tied copies are compared).
   */
  model?: ModelManifest;
  plans?: LocalParam[][][];
  /** The command line a failure prints to reproduce the run, when trainRepro cannot express it. */
  repro?: string;
}

interface StepComparison {
  backend: Backend;
  states: TrainState[];
  runs: TrainLayoutRun[];
  tolerance: ToleranceClass;
  normType: number;
  elementsWithGrad: number;
  /** Where a non-exact class's layouts differed bitwise (allowed), the first 20. */
  notes: string[];
}

/**
 * The comparisons after `step`: the judge's (states.ts, in its own realm: tied copies within each layout,
 * every layout against the first), and the norms the ranks returned here. The first failure, or null.
 */
async function compareStep(step: number, c: StepComparison): Promise<string | null> {
  const { backend, states, runs, tolerance, notes } = c;
  const verdict = await currentJudge().states(
    {
      backend: backend.kind,
      ranks: backend.ranks,
      states: states.map(sharedState),
      tied: states.map((_, i) => i),
      pairs: states.slice(1).map((_, k) => ({ expected: 0, actual: k + 1, limit: 1, words: { actual: `in ${runs[k + 1]!.layout}`, expected: `in ${runs[0]!.layout}` } })),
    },
    backend,
  );
  const tiedAt = verdict.tied.findIndex((t) => t !== null);
  if (tiedAt >= 0) return `in ${runs[tiedAt]!.layout}, tied copies differ: ${verdict.tied[tiedAt]}`;
  for (let i = 1; i < states.length; i++) {
    if (step > 0) {
      const a = runs[0]!.norms[step - 1]!;
      const b = runs[i]!.norms[step - 1]!;
      // twice the class's distance to the reference: each layout's norm may sit on either side of it
      const same = sameNorm(a, b) || Math.abs(a - b) <= 2 * normTolerance(tolerance, c.normType, c.elementsWithGrad) * Math.max(Math.abs(a), Math.abs(b));
      if (!same) return `total norm ${show(b)} in ${runs[i]!.layout}; ${show(a)} in ${runs[0]!.layout} (tolerance ${tolerance})`;
    }
    const diff = verdict.pairs[i - 1]!;
    if (diff.count > 0) {
      if (tolerance === "exact") return `layouts differ (${diff.count} tensors or step counts): ${diff.differences[0]}`;
      if (notes.length < 20) notes.push(`step ${step}: ${diff.differences[0]}`);
    }
  }
  return null;
}

export async function runTrain(cell: TrainCell, options: TrainOptions): Promise<TrainResult> {
  const started = performance.now();
  if (!options.model) validateTrainCell(cell);
  else refusePartialGradients(options.model, "the fuzz case");
  if (options.model && options.model.name !== cell.model) throw new Error(`internal: cell.model "${cell.model}" does not name the model given ("${options.model.name}")`);
  if (options.plans && options.plans.length !== cell.layouts.length) throw new Error(`internal: ${options.plans.length} plans for ${cell.layouts.length} layouts`);
  const subject = options.subject;
  const tolerance = subject.tolerance ?? "fp32";
  const model = options.model ?? getModel(cell.model);
  // the terms of the norm's power sum, which fp32-accum's bound grows with
  const hasGrad = regimeSpec(cell.regime).hasGrad;
  const elementsWithGrad = countParams(model, (p) => hasGrad(p.index));
  const layouts = cell.layouts.map((l) => validateLayout(l));
  const cfg: TrainConfig = {
    subject,
    model,
    dtype: cell.dtype,
    normType: cell.normType,
    regime: cell.regime,
    seed: cell.seed,
    init: cell.init,
    timeoutMs: options.timeoutMs,
  };
  const repro = options.repro ?? trainRepro(cell);
  const runs: TrainLayoutRun[] = layouts.map((l) => ({ layout: formatLayout(l), world: worldSize(l), ms: 0, norms: [] }));
  const notes: string[] = [];
  const backend = new Backend("cpu", Math.max(...runs.map((r) => r.world)));
  const states: TrainState[] = [];
  let compareMs = 0;
  let stepsCompared = -1;
  let check: CheckResult | undefined;
  const failAt = (step: number, what: string) => {
    check = fail(TRAIN_CHECK, `step ${step}${step === 0 ? " (the initial state, after the sync of tied copies)" : ""}: ${what}\n  reproduce: ${repro}`);
  };
  const compareAt = async (step: number): Promise<boolean> => {
    const t0 = performance.now();
    try {
      const failure = await compareStep(step, { backend, states, runs, tolerance, normType: cell.normType, elementsWithGrad, notes });
      if (failure !== null) failAt(step, failure);
      else stepsCompared = step;
      return failure === null;
    } finally {
      compareMs += performance.now() - t0;
    }
  };
  try {
    try {
      for (const [i, l] of layouts.entries()) {
        const t0 = performance.now();
        const s = initState(backend, l, cfg, options.plans?.[i]);
        states.push(s);
        await afterInit(backend, s, cfg);
        runs[i]!.ms += performance.now() - t0;
      }
      if (await compareAt(0)) {
        for (let t = 1; t <= cell.steps; t++) {
          for (const [i, s] of states.entries()) {
            const t0 = performance.now();
            await trainSteps(backend, s, cfg, t);
            runs[i]!.ms += performance.now() - t0;
            runs[i]!.norms.push(s.norms.get(t)!);
          }
          if (!(await compareAt(t))) break;
        }
      }
    } catch (err) {
      if (!(err instanceof TrainingError)) throw err;
      failAt(err.step, `the training could not complete: ${err.message}`);
    }
    check ??= pass(
      TRAIN_CHECK,
      tolerance === "exact" || states.length < 2
        ? `${cell.steps} steps: every parameter, exp_avg, exp_avg_sq and step count bitwise equal across ${runs.map((r) => r.layout).join(" and ")} and between tied copies after every step`
        : `${cell.steps} steps: tied copies bitwise equal in every layout after every step, norms within ${tolerance} across layouts` +
            (notes.length ? `; layouts differ bitwise from ${notes[0]!.split(":")[0]} (allowed for ${tolerance}: reduction order differs)` : "; layouts bitwise equal too"),
    );
  } finally {
    for (const s of states) freeState(backend, s);
    backend.freeAll();
    for (let r = 0; r < backend.ranks; r++) {
      if (backend.liveBytes(r) !== 0) throw new Error(`internal: rank ${r} ledger not zero after the train cell (${backend.liveBytes(r)} bytes)`);
    }
  }
  return {
    id: trainId(cell),
    cell,
    subjectName: subject.name,
    tolerance,
    check: check!,
    layouts: runs,
    stepsCompared: Math.max(0, stepsCompared),
    notes,
    durationMs: performance.now() - started,
    compareMs,
  };
}

/**
 * The short training loop of the resume checks (SPEC §9): per step t = 1..T, every rank's gradient
 * shards from the SPEC §5 generator at step t (as a cell fills them), the subject's clip run on
 * every rank at once (as `runCell` runs it), then one AdamW step per physical copy that has a
 * gradient (float32 parameters and state).
 *
 * A TrainState is one layout's worth of physical copies (tied replicas included) with their
 * parameter, exp_avg and exp_avg_sq shards and optimizer step counts.
 */
import type { DType, ParamView, Subject } from "../subject/api.ts";
import type { CopyState, TrainState } from "../judge/train-state.ts";
import type { Backend, GenSpec } from "../backend/backend.ts";
import { validateLayout, worldSize, type Layout } from "../layout/layout.ts";
import type { ModelManifest } from "../model/manifest.ts";
import { planWorld, type LocalParam } from "../model/plan.ts";
import { maxNormOf, regimeSpec, type Regime } from "../gradients/regimes.ts";
import { computeReference } from "../gradients/reference.ts";
import { World } from "../world/world.ts";
import { clipArgs, meshesOf, rankContext } from "../world/context.ts";
import { hardenHandedOut } from "../util/harden.ts";
import { ADAMW, PARAM_INIT, STATE_DTYPE, stageInitSeed } from "./adamw.ts";
import { gradSpecs } from "../gradients/specs.ts";

/**
 * How parameters are initialised: "same" (every physical copy from the generator under its logical
 * name: tied copies start equal), or "per-stage" (as a PP trainer seeds each stage: a tied replica
 * gets its own stage's values, so the copies start different until the subject's `afterInit`
 * synchronizes them).
 */
export type InitMode = "same" | "per-stage";
export const INIT_MODES: readonly InitMode[] = ["per-stage", "same"];

/** What a training run is, whichever layouts it runs on: a `resume` cell's and a `train` cell's common part. */
export interface TrainingCase {
  /** A built-in subject name or a module path. */
  subject: string;
  model: string;
  /** Gradient dtype (parameters and optimizer state are float32). */
  dtype: DType;
  normType: number;
  regime: Regime;
  seed: number;
  /** T: training steps in all. */
  steps: number;
}

/** What the loop needs besides the layout. */
export interface TrainConfig {
  subject: Subject;
  model: ModelManifest;
  /** Gradient dtype (parameters and state are float32). */
  dtype: DType;
  normType: number;
  regime: Regime;
  seed: number;
  /** Wall-clock limit of one step's clip, in ms. */
  timeoutMs?: number;
  /** Initial values (default "same"). */
  init?: InitMode;
}

/** A clip that did not complete at some step: the run cannot be compared. */
export class TrainingError extends Error {
  constructor(
    readonly step: number,
    message: string,
  ) {
    super(`step ${step}: ${message}`);
    this.name = "TrainingError";
  }
}

/** The initial-value generator of a logical parameter (adamw.ts: PARAM_INIT). */
export function initGen(seed: number, name: string): GenSpec {
  return { seed: BigInt(seed), step: PARAM_INIT.step, name: PARAM_INIT.prefix + name, dtype: PARAM_INIT.dtype, exp: PARAM_INIT.exp, mode: PARAM_INIT.mode };
}

/**
 * Allocates every physical copy of `layout` on `backend` (ranks 0..world-1), parameters initialised
 * from the generator, state zero, step counts 0: a freshly built model and optimizer. `plan` (index =
 * rank) replaces the model's default plan on the layout (a fuzz case's synthetic placements).
 */
export function initState(backend: Backend, layout: Layout, cfg: TrainConfig, plan?: LocalParam[][]): TrainState {
  const l = validateLayout(layout);
  const world = worldSize(l);
  if (plan && plan.length !== world) throw new Error(`internal: a plan of ${plan.length} ranks for a layout of ${world}`);
  plan ??= planWorld(cfg.model, l);
  const regime = regimeSpec(cfg.regime);
  const ranks = plan.map((params, rank) =>
    params.map((lp): CopyState => {
      const param = backend.alloc(rank, STATE_DTYPE, lp.block.len);
      const perStage = cfg.init === "per-stage" && !lp.canonical;
      // per-stage: the replica's stage draws its own values (its own seed, its own FQN)
      backend.fillGrad(param, perStage ? initGen(stageInitSeed(cfg.seed, lp.stage), lp.fqn) : initGen(cfg.seed, lp.name), lp.block);
      return {
        lp,
        param,
        expAvg: backend.alloc(rank, STATE_DTYPE, lp.block.len),
        expAvgSq: backend.alloc(rank, STATE_DTYPE, lp.block.len),
        grad: regime.hasGrad(lp.index) ? backend.alloc(rank, cfg.dtype, lp.block.len) : null,
        steps: 0,
      };
    }),
  );
  return { layout: l, world, plan, ranks, step: 0, norms: new Map() };
}

/** Frees every tensor of a state. */
export function freeState(backend: Backend, s: TrainState): void {
  for (const copies of s.ranks) {
    for (const c of copies) {
      for (const t of [c.param, c.expAvg, c.expAvgSq, c.grad]) if (t) backend.free(t);
    }
  }
  s.ranks = [];
}

/** Frees the gradient buffers only (after the last step, to keep the peak down). */
export function freeGrads(backend: Backend, s: TrainState): void {
  for (const copies of s.ranks) {
    for (const c of copies) {
      if (c.grad) backend.free(c.grad);
      c.grad = null;
    }
  }
}

/** The ParamViews of every rank of a state (`param` set; `grad` when `withGrad`). */
function viewsOf(s: TrainState, withGrad: boolean): ParamView[][] {
  return s.ranks.map((copies) =>
    copies.map(({ lp, grad, param }) =>
      Object.freeze({
        fqn: lp.fqn,
        name: lp.name,
        canonical: lp.canonical,
        tieGroup: lp.tieGroup,
        kind: lp.kind,
        layer: lp.layer,
        stage: lp.stage,
        mesh: lp.mesh,
        meshAxes: lp.meshAxes,
        placements: lp.placements,
        globalShape: lp.block.globalShape,
        block: lp.block,
        grad: withGrad ? grad : null,
        param,
      }),
    ),
  );
}

/**
 * The trainer's sync of tied copies after init, done by the harness for a plain clip subject (which
 * is a clip function, not a trainer): every replica's values from its canonical copy's blocks.
 */
export function harnessSyncTied(backend: Backend, s: TrainState): void {
  const canonical = s.ranks.flat().filter((c) => c.lp.canonical && c.lp.tieGroup);
  for (const copies of s.ranks) {
    for (const c of copies) {
      if (c.lp.canonical || !c.lp.tieGroup) continue;
      let n = 0;
      for (const src of canonical) if (src.lp.name === c.lp.name) n += backend.copyBlock(c.param, c.lp.block, src.param, src.lp.block);
      if (n !== c.lp.numel) throw new Error(`internal: the canonical copies cover ${n} of ${c.lp.numel} elements of ${c.lp.fqn}`);
    }
  }
}

/**
 * After a fresh init: an optimizer-shaped subject (a trainer) runs its own `afterInit` on every rank,
 * where it synchronizes tied copies, or skips the sync if it has none; for a plain clip subject the
 * harness, as its trainer, synchronizes them (harnessSyncTied). Throws TrainingError (step 0) when
 * the subject's hook does not complete.
 */
export async function afterInit(backend: Backend, s: TrainState, cfg: TrainConfig): Promise<void> {
  if (cfg.subject.shape !== "optimizer") {
    harnessSyncTied(backend, s);
    return;
  }
  const hook = cfg.subject.afterInit;
  if (!hook) return;
  const meshes = meshesOf(s.layout);
  const views = viewsOf(s, false);
  const world = new World(s.world, backend);
  const run = await world.run((rank) => hook.call(cfg.subject, rankContext(rank, s.layout, meshes, world, backend, s.plan), hardenHandedOut({ params: views[rank]! })), {
    timeoutMs: cfg.timeoutMs,
  });
  if (run.liveness) throw new TrainingError(0, `afterInit did not complete: ${run.liveness}`);
  const bad = run.ranks.find((o) => o.error);
  if (bad) throw new TrainingError(0, `afterInit on rank ${bad.rank} raised: ${bad.error!.message}`);
}

/**
 * Runs training steps s.step + 1 .. `to`: gradients, the subject's clip with error_if_nonfinite =
 * False (a training loop that must not stop), AdamW. Throws TrainingError when a clip does not
 * complete on every rank.
 */
export async function trainSteps(backend: Backend, s: TrainState, cfg: TrainConfig, to: number): Promise<void> {
  const regime = regimeSpec(cfg.regime);
  const meshes = meshesOf(s.layout);
  const views = viewsOf(s, true);
  for (let t = s.step + 1; t <= to; t++) {
    // what each copy holds before the clip: the logical gradient, or an optimizer-shaped subject's raw partials
    const specs = gradSpecs(cfg.model, { dtype: cfg.dtype, regime: cfg.regime, seed: cfg.seed, step: t, pp: s.layout.pp, shape: cfg.subject.shape });
    for (const copies of s.ranks) for (const c of copies) if (c.grad) backend.fillGrad(c.grad, specs.input(c.lp), c.lp.block);
    const maxNormCase = { regime: cfg.regime, seed: cfg.seed, model: cfg.model.name, dtype: cfg.dtype, normType: cfg.normType, step: t };
    const maxNorm = regime.maxNorm === "boundary" ? maxNormOf(maxNormCase, computeReference(cfg.model, cfg.dtype, cfg.normType, cfg.regime, cfg.seed, t).totalNorm) : regime.maxNorm;
    const world = new World(s.world, backend);
    const run = await world.run(
      (rank) =>
        cfg.subject.clip(rankContext(rank, s.layout, meshes, world, backend, s.plan), clipArgs(views[rank], { maxNorm, normType: cfg.normType, errorIfNonfinite: false })),
      { timeoutMs: cfg.timeoutMs },
    );
    if (run.liveness) throw new TrainingError(t, `the clip did not complete: ${run.liveness}`);
    const bad = run.ranks.find((o) => o.error || typeof o.value !== "number");
    if (bad) throw new TrainingError(t, `the clip on rank ${bad.rank} ${bad.error ? `raised: ${bad.error.message}` : `returned ${String(bad.value)}`}`);
    s.norms.set(t, run.ranks[0]!.value as number);
    for (const copies of s.ranks) {
      for (const c of copies) {
        if (!c.grad) continue;
        c.steps++;
        backend.adamwStep(c.param, c.grad, c.expAvg, c.expAvgSq, c.steps, ADAMW);
      }
    }
    s.step = t;
  }
}

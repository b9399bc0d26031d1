/**
 * The short training loop of the resume checks (SPEC §9): per step t = 1..T, every rank's gradient
 * shards from the SPEC §5 generator at step t (as a cell fills them), the subject's clip run on
 * every rank at once (as `runCell` runs it), then one AdamW step per physical copy that has a
 * gradient (float32 parameters and state).
 *
 * A TrainState is one layout's worth of physical copies (tied replicas included) with their
 * parameter, exp_avg and exp_avg_sq shards and optimizer step counts.
 */
import type { DType, ParamView, Subject, Tensor } from "../clip/api.ts";
import type { Backend, GenSpec } from "../backend/backend.ts";
import { validateLayout, worldSize, type Layout, type ValidLayout } from "../layout/layout.ts";
import type { ModelManifest } from "../model/manifest.ts";
import { planWorld, type LocalParam } from "../model/plan.ts";
import { f32Below, regimeSpec, type Regime } from "../clip/regimes.ts";
import { computeReference } from "../clip/reference.ts";
import { World } from "../world/world.ts";
import { meshesOf, rankContext } from "../world/context.ts";
import { ADAMW, PARAM_INIT, STATE_DTYPE } from "./adamw.ts";

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
}

/** One physical copy on one rank. */
export interface CopyState {
  lp: LocalParam;
  param: Tensor;
  expAvg: Tensor;
  expAvgSq: Tensor;
  /** Null when the regime gives this logical parameter no gradient. */
  grad: Tensor | null;
  /** torch's state["step"]: the AdamW updates this copy received. */
  steps: number;
}

export interface TrainState {
  layout: ValidLayout;
  world: number;
  plan: LocalParam[][];
  /** index = rank; aligned with plan[rank] */
  ranks: CopyState[][];
  /** Training steps completed (the global step). */
  step: number;
  /** Rank 0's total norm at each step run by this state, by step number. */
  norms: Map<number, number>;
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
 * from the generator, state zero, step counts 0: a freshly built model and optimizer.
 */
export function initState(backend: Backend, layout: Layout, cfg: TrainConfig): TrainState {
  const l = validateLayout(layout);
  const world = worldSize(l);
  const plan = planWorld(cfg.model, l);
  const regime = regimeSpec(cfg.regime);
  const ranks = plan.map((params, rank) =>
    params.map((lp): CopyState => {
      const param = backend.alloc(rank, STATE_DTYPE, lp.block.len);
      backend.fillGrad(param, initGen(cfg.seed, lp.name), lp.block);
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

function gradGen(cfg: TrainConfig, step: number, specialIndex: number, p: { name: string; index: number }): GenSpec {
  const regime = regimeSpec(cfg.regime);
  const g: GenSpec = { seed: BigInt(cfg.seed), step, name: p.name, dtype: cfg.dtype, exp: regime.exp, mode: regime.mode };
  if (p.index === specialIndex) {
    g.specialIndex = 0;
    g.specialValue = regime.special!;
  }
  return g;
}

/**
 * Runs training steps s.step + 1 .. `to`: gradients, the subject's clip with error_if_nonfinite =
 * False (a training loop that must not stop), AdamW. Throws TrainingError when a clip does not
 * complete on every rank.
 */
export async function trainSteps(backend: Backend, s: TrainState, cfg: TrainConfig, to: number): Promise<void> {
  const regime = regimeSpec(cfg.regime);
  let specialIndex = -1;
  if (regime.special !== null) for (const p of cfg.model.params) if (specialIndex < 0 && regime.hasGrad(p.index)) specialIndex = p.index;
  const meshes = meshesOf(s.layout);
  const views: ParamView[][] = s.ranks.map((copies) =>
    copies.map(({ lp, grad }) =>
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
        grad,
      }),
    ),
  );
  for (let t = s.step + 1; t <= to; t++) {
    for (const copies of s.ranks) for (const c of copies) if (c.grad) backend.fillGrad(c.grad, gradGen(cfg, t, specialIndex, c.lp), c.lp.block);
    const maxNorm =
      regime.maxNorm === "boundary"
        ? f32Below(computeReference(cfg.model, cfg.dtype, cfg.normType, cfg.regime, cfg.seed, t).totalNorm)
        : regime.maxNorm;
    const world = new World(s.world, backend);
    const run = await world.run(
      (rank) =>
        cfg.subject.clip(rankContext(rank, s.layout, meshes, world, backend), {
          params: views[rank],
          maxNorm,
          normType: cfg.normType,
          errorIfNonfinite: false,
        }),
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

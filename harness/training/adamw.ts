/**
 * The optimizer of the resume checks (SPEC §9): torch.optim.AdamW semantics (foreach=False,
 * amsgrad=False, maximize=False), float32 parameters and float32 state, computed natively
 * (native/core/src/optim.rs) with a fixed float32 operation order, so every run is bitwise
 * reproducible. The hyper-parameters are torchtitan's defaults for its debug models.
 */
import type { DType } from "../subject/api.ts";

export interface AdamWHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

/** lr 8e-4, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 (torchtitan's defaults). */
export const ADAMW: Readonly<AdamWHyper> = Object.freeze({ lr: 8e-4, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });

/** Parameters, exp_avg and exp_avg_sq are float32 whatever the gradient dtype (mixed precision's master weights). */
export const STATE_DTYPE: DType = "f32";

/**
 * Initial parameter values: the SPEC §5 generator under the name `PARAM_PREFIX + canonical name`,
 * step 0, float32 (m = 24), e = 0 (so every initial weight is in (-1, 1)), mode "gen", whatever the
 * cell's regime. Every physical copy of a tied parameter starts from the same values.
 */
export const PARAM_PREFIX = "param:";
/**
 * `--init per-stage` (train): a tied replica is initialised as its own PP stage's RNG would: the
 * generator under PARAM_PREFIX + the replica's physical FQN with this seed, distinct per stage.
 */
export function stageInitSeed(seed: number, stage: number): number {
  return seed + 1_000_003 * (stage + 1);
}
export const PARAM_INIT = Object.freeze({ prefix: PARAM_PREFIX, step: 0, dtype: "f32" as DType, exp: 0, mode: "gen" as const });

/**
 * The step count after t training steps: steps are numbered 1..T, gradients of step t come from the
 * generator with step = t, and each parameter's optimizer step count (torch's state["step"]) counts
 * the updates it received (a parameter with no gradient at a step is skipped, as torch skips it).
 */
export const FIRST_STEP = 1;

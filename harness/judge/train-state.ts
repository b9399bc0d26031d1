/**
 * The training state: one layout's worth of physical copies (tied replicas included) with their
 * parameter, exp_avg and exp_avg_sq shards and optimizer step counts. training/ builds, steps and
 * checkpoints it; the judge compares states (state-compare.ts), so the type lives on the judge's side.
 */
import type { Tensor } from "../subject/api.ts";
import type { ValidLayout } from "../layout/layout.ts";
import type { LocalParam } from "../model/plan.ts";

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

/** The three tensors a copy holds, by their names in torch's optimizer state and in checkpoints. */
export const ROLES = ["param", "exp_avg", "exp_avg_sq"] as const;
export type Role = (typeof ROLES)[number];

export function roleTensor(c: CopyState, role: Role): Tensor {
  return role === "param" ? c.param : role === "exp_avg" ? c.expAvg : c.expAvgSq;
}

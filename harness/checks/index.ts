/** Every check, in report order. One module per check id. */
import type { Check } from "./types.ts";
import parityNorm from "./parity-norm.ts";
import parityTensors from "./parity-tensors.ts";
import parityRanks from "./parity-ranks.ts";
import scalingNonempty from "./scaling-nonempty.ts";
import scalingReplicas from "./scaling-replicas.ts";
import liveness from "./liveness.ts";
import errorsNonfinite from "./errors-nonfinite.ts";
import memoryPeak from "./memory-peak.ts";
import memoryLeak from "./memory-leak.ts";
import commBudget from "./comm-budget.ts";

export type { Check, CheckResult, CheckStatus } from "./types.ts";

export const CHECKS: readonly Check[] = [
  parityNorm,
  parityTensors,
  parityRanks,
  scalingNonempty,
  scalingReplicas,
  liveness,
  errorsNonfinite,
  memoryPeak,
  memoryLeak,
  commBudget,
];

export const CHECK_IDS: readonly string[] = CHECKS.map((c) => c.id);

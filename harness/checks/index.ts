/**
 * Every check, in report order: one module per check id. Adding a check is its module and one line in
 * CHECKS (judged from a cell) or RUN_CHECKS (judged by the runner around the cells).
 */
import type { Check, CheckInfo } from "./types.ts";
import parityNorm from "./parity-norm.ts";
import parityTensors from "./parity-tensors.ts";
import parityRanks from "./parity-ranks.ts";
import scalingNonempty from "./scaling-nonempty.ts";
import scalingReplicas from "./scaling-replicas.ts";
import liveness from "./liveness.ts";
import errorsNonfinite from "./errors-nonfinite.ts";
import errorsRaised from "./errors-raised.ts";
import memoryPeak from "./memory-peak.ts";
import memoryLeak from "./memory-leak.ts";
import commBudget from "./comm-budget.ts";
import commReach from "./comm-reach.ts";
import { isolation } from "./isolation.ts";
import { golden } from "./golden.ts";


export type { CanFailFacts, Check, CheckInfo, CheckResult, CheckStatus, Severity } from "./types.ts";

export const CHECKS: readonly Check[] = [
  parityNorm,
  parityTensors,
  parityRanks,
  scalingNonempty,
  scalingReplicas,
  liveness,
  errorsNonfinite,
  errorsRaised,
  memoryPeak,
  memoryLeak,
  commBudget,
  commReach,
];

export const CHECK_IDS: readonly string[] = CHECKS.map((c) => c.id);

/** Checks the runner judges around the cells (how the subject's code ended, the golden file), after CHECKS in a result. */
export const RUN_CHECKS: readonly CheckInfo[] = [isolation, golden];

/** Every check a result can hold, by id. */
export const CHECK_INFO: ReadonlyMap<string, CheckInfo> = new Map([...CHECKS, ...RUN_CHECKS].map((c) => [c.id, c]));

export { severityOf } from "../results/severity.ts";

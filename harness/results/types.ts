/**
 * What a run produces: per cell, the checks' verdicts, the norms, memory and collectives per rank.
 * Reporters, goldens, `gate` and `merge` depend on these types (and on the JSON shape in json.ts),
 * never on how the cells were run.
 */
import type { Cell } from "../cell/cell.ts";
import type { BackendKind, StageRecord } from "../backend/backend.ts";
import type { CommRecord } from "../subject/api.ts";

export type CheckStatus = "pass" | "fail" | "skip";

/**
 * What a failing check means for the user. "correctness": the clip computed or did something wrong (a wrong
 * norm, unequal scaling, a hang, a raise nothing asked for, memory beyond budget): the training run is not
 * the one asked for. "performance": the result is right but costs more than it must (collectives beyond
 * the fused optimum). Both fail a built-in suite's cell (CI gates on either); reports say which it was, and
 * docs/frameworks.md lists performance findings apart, as notes.
 */
export type Severity = "correctness" | "performance";

export const SEVERITIES: readonly Severity[] = ["correctness", "performance"];

export interface CheckResult {
  id: string;
  status: CheckStatus;
  message: string;
  /**
   * The judging check's severity (its declaration: checks/types.ts defineCheck stamps it). Absent in a result
   * read from a file (json.ts writes id, status and message): then the check's declaration, by id, says it
   * (checks/index.ts severityOf).
   */
  severity?: Severity;
}

/**
 * A failing cell of a framework's subject on the one severity scale the CLI, the results file and docs/frameworks.md
 * share (harness/external/causes.ts): the highest of its root causes' severities, and each cause as the framework's
 * maintainers read it. `outside`: why the cell is outside the framework's configurations, when it is.
 */
export interface CauseVerdict {
  severity: string;
  /** `minimal`: the few lines of Python that show the cause in one process, where the framework file gives them. */
  causes: { text: string; source: string | null; upstream: string; severity: string; minimal?: string }[];
  outside?: string;
}

export interface RankMemory {
  rank: number;
  /** Live bytes of gradients when the clip starts. */
  gradBytes: number;
  /** Peak during the clip minus live bytes before it. */
  scratchPeakBytes: number;
  /** float32 size of the rank's largest local shard + 1 MiB (SPEC §10), or what the subject's declared design sets. */
  budgetBytes: number;
  /** The rule of a budget the subject's declared design set (ExternalRun.scratchBudget), in words. */
  budgetRule?: string;
  /** Bytes the subject left allocated after the clip. */
  leakedBytes: number;
  /** The ledger at named stages; on cuda also the device's own free/total readings beside it. */
  stages: StageRecord[];
}

/** Milliseconds spent in each phase of a cell (issue 13's profile); absent phases are 0. */
export interface CellTimings {
  plan: number;
  reference: number;
  allocate: number;
  generate: number;
  subject: number;
  collectives: number;
  checks: number;
  free: number;
  total: number;
}

export const TIMING_PHASES = ["plan", "reference", "allocate", "generate", "subject", "collectives", "checks", "free"] as const;

export interface CellResult {
  id: string;
  cell: Cell;
  backend: BackendKind;
  subjectName: string;
  maxNorm: number;
  errorIfNonfinite: boolean;
  totalNorm: number | null;
  referenceNorm: number;
  clipCoef: number;
  checks: CheckResult[];
  ranks: { rank: number; norm?: number; error?: string }[];
  memory: RankMemory[];
  comm: CommRecord[];
  liveness: string | null;
  repro: string;
  durationMs: number;
  /** Per phase; absent for a cell that never ran in full (a worker that died). */
  timings?: CellTimings;
  /** Hash of every local gradient after the clip (goldens); computed only when asked for. */
  tensorHash?: string | null;
  /** A failing cell of a subject that reads its causes (a torch: subject): its severity and causes. */
  verdict?: CauseVerdict;
}

/**
 * An external subject that reads a failing cell as its maintainers would (a torch: subject's causes, on the one
 * severity scale); null when there is nothing to say. Set on the cell's result as `verdict`. Kept out of the
 * subject API (harness/subject/api.ts), which the results' types import: the API must not import them back.
 */
export interface ReadsVerdict {
  verdictOf(result: CellResult): CauseVerdict | null;
}

export interface RunSummary {
  cells: number;
  passed: number;
  failed: number;
  skipped: number;
}

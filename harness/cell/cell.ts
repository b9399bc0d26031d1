/**
 * What to run (SPEC §2): a cell is one subject on one layout, model, dtype, norm type and regime; a
 * case is a cell without its subject; a matrix is a named list of cases and the subjects to run on
 * them. Only the description lives here: how a cell runs is harness/run, how it is judged harness/checks.
 */
import { commandLine } from "../util/shell.ts";
import type { DType } from "../subject/api.ts";
import type { Regime } from "../gradients/regimes.ts";
import type { BackendKind } from "../backend/backend.ts";
import { formatLayout, type ValidLayout } from "../layout/layout.ts";

export const DTYPES: readonly DType[] = ["f32", "bf16", "f16"];

/** What identifies a cell. `subject` is a built-in name, a module path or `torch:...`. */
export interface Cell {
  subject: string;
  layout: ValidLayout;
  model: string;
  dtype: DType;
  /** 2, 1, Infinity or any p > 0. */
  normType: number;
  regime: Regime;
  seed: number;
  /** Overrides the regime's max_norm. */
  maxNorm?: number;
  /** Overrides the regime's default. */
  errorIfNonfinite?: boolean;
  step?: number;
}

export type Case = Omit<Cell, "subject">;

/** What the default scratch budget allows above the float32 size of a rank's largest local shard. */
export const DEFAULT_SCRATCH_SLACK_BYTES = 1024 * 1024;

/** Per-matrix overrides of the default budgets of SPEC §10. */
export interface Budgets {
  /** Scratch bytes allowed per rank during the clip (default: float32 size of the largest local shard + 1 MiB). */
  scratchBytes?: number;
  /**
   * What the default budget allows above the float32 size of the largest local shard (default 1 MiB).
   * The fuzzer's cases hold a few hundred bytes: there the slack is sized to the case, so that a copy of
   * every gradient shows.
   */
  scratchSlackBytes?: number;
  /** Collectives allowed per rank per clip (default: comm.budget's rule, distinct reduction groups + 1 for the PP reduction when pp > 1). */
  collectives?: number;
}

export interface Matrix {
  name: string;
  description: string;
  /** The backend its cells are meant for: "cuda" matrices refuse to run elsewhere unless told. */
  backend: "cpu" | "cuda";
  cases: Case[];
  /** Subjects to run on every case; undefined = the correct built-in subjects. */
  subjects?: string[];
  /** Overrides of the default memory and collective budgets (SPEC §10). */
  budgets?: Budgets;
}

export function formatNorm(p: number): string {
  return p === Infinity ? "inf" : String(p);
}

export function cellId(c: Cell): string {
  const parts = [c.subject, formatLayout(c.layout), c.model, c.dtype, `n${formatNorm(c.normType)}`, c.regime, `s${c.seed}`];
  if (c.maxNorm !== undefined) parts.push(`max${c.maxNorm}`);
  if (c.errorIfNonfinite !== undefined) parts.push(c.errorIfNonfinite ? "err" : "noerr");
  if (c.step) parts.push(`step${c.step}`);
  return parts.join("/");
}

/** One command line that reruns this cell alone. */
export function reproCommand(c: Cell, backend: BackendKind): string {
  const args: (string | number | boolean)[] = [
    "--subject", c.subject,
    "--layout", formatLayout(c.layout),
    "--model", c.model,
    "--dtype", c.dtype,
    "--norm", formatNorm(c.normType),
    "--regime", c.regime,
    "--seed", c.seed,
  ];
  if (c.maxNorm !== undefined) args.push("--max-norm", c.maxNorm);
  if (c.errorIfNonfinite !== undefined) args.push("--error-if-nonfinite", c.errorIfNonfinite);
  if (backend !== "cpu") args.push("--backend", backend);
  return commandLine("npx clip-parity cell", args);
}

/** The cells of a matrix: each subject on each case, subject-major. */
export function cellsOf(matrix: Pick<Matrix, "cases">, subjects: readonly string[]): Cell[] {
  return subjects.flatMap((subject) => matrix.cases.map((c) => ({ subject, ...c })));
}

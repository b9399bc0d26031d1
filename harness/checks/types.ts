/**
 * A check: one named pass/fail criterion with a stable id (SPEC §8), judged from a cell's outcome.
 */
import type { ParamView, Subject, Tensor, ToleranceClass } from "../clip/api.ts";
import type { Reference } from "../clip/reference.ts";
import type { Backend, GenSpec } from "../backend/backend.ts";
import type { LocalParam } from "../model/plan.ts";
import type { CommRecord, RankOutcome } from "../world/world.ts";
import type { Budgets, Cell } from "../spec/cell.ts";
import type { CheckResult, RankMemory } from "../results/types.ts";

export type { CheckResult, CheckStatus } from "../results/types.ts";

/** Everything a check may look at. Tensors stay alive until every check has judged. */
export interface CheckContext {
  cell: Cell;
  backend: Backend;
  subject: Subject;
  tolerance: ToleranceClass;
  maxNorm: number;
  errorIfNonfinite: boolean;
  reference: Reference;
  /** The reference's clip coefficient. */
  clipCoef: number;
  plan: LocalParam[][];
  grads: (Tensor | null)[][];
  views: ParamView[][];
  outcomes: RankOutcome<number>[];
  liveness: string | null;
  memory: RankMemory[];
  comm: CommRecord[];
  /**
   * What p's copy must hold, scaled, after the clip: the logical gradient of its logical parameter, or
   * for a copy placed Partial(sum) its own partial (DTensor scales a Partial tensor's local partial).
   */
  genSpec(p: LocalParam): GenSpec;
  /** The logical gradient of p's logical parameter (the sum of the partials for a Partial one). */
  logicalSpec(p: LocalParam): GenSpec;
  /**
   * What p's copy was filled with before the clip: genSpec(p), except an optimizer-shaped subject's
   * tied copies (raw partials: clip/finalize.ts).
   */
  inputSpec(p: LocalParam): GenSpec;
  repro: string;
  budgets: Budgets;
}

export interface Check {
  id: string;
  /** One line: what it catches. */
  description: string;
  judge(ctx: CheckContext): CheckResult;
}

export function defineCheck(check: Check): Check {
  return check;
}

export const pass = (id: string, message = ""): CheckResult => ({ id, status: "pass", message });
export const fail = (id: string, message: string): CheckResult => ({ id, status: "fail", message });
export const skip = (id: string, message: string): CheckResult => ({ id, status: "skip", message });

/** Ranks whose clip did not return a norm, as a reason to skip value checks. */
export function notComparable(ctx: CheckContext): string | null {
  if (ctx.backend.isMeta) return "the meta backend holds no values";
  if (ctx.liveness) return "liveness failed";
  const threw = ctx.outcomes.filter((o) => o.error);
  if (threw.length) return `rank ${threw[0].rank} raised: ${threw[0].error!.message}`;
  return null;
}

/**
 * How far a norm may be from the reference, relative to it, in each tolerance class (SPEC §6):
 * exact: bitwise; fp32: 4 ulp of float32; bf16: 4 ulp of bfloat16.
 */
export const NORM_TOLERANCE: Readonly<Record<ToleranceClass, number>> = Object.freeze({ exact: 0, fp32: 4 * 2 ** -24, bf16: 4 * 2 ** -8 });

/** Equal as float32 norms: bitwise, with NaN equal to NaN. */
export function sameNorm(a: number, b: number): boolean {
  return Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)) || a === b;
}

/** The global row-major flat index of local element `j` of a block. */
export function globalIndex(block: { globalShape: number[]; start: number[]; len: number[] }, j: number): number {
  let rem = j;
  let idx = 0;
  let stride = 1;
  const coords: number[] = new Array(block.len.length);
  for (let d = block.len.length - 1; d >= 0; d--) {
    coords[d] = rem % block.len[d];
    rem = Math.floor(rem / block.len[d]);
  }
  for (let d = block.globalShape.length - 1; d >= 0; d--) {
    idx += (block.start[d] + coords[d]) * stride;
    stride *= block.globalShape[d];
  }
  return idx;
}

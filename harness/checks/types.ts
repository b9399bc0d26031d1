/**
 * A check: one named pass/fail criterion with a stable id (SPEC §8), judged from a cell's outcome.
 */
import type { ParamView, Subject, Tensor, ToleranceClass } from "../subject/api.ts";
import type { Reference } from "../gradients/reference.ts";
import { clipCoefficientIn, roundedCoefficients } from "./low-precision.ts";
import type { Backend, GenSpec } from "../backend/backend.ts";
import type { LocalParam } from "../model/plan.ts";
import type { RankOutcome } from "../world/world.ts";
import type { CommRecord } from "../subject/api.ts";
import type { Budgets, Cell } from "../cell/cell.ts";
import type { CheckResult, RankMemory, Severity } from "../results/types.ts";

export type { CheckResult, CheckStatus, Severity } from "../results/types.ts";

/** Everything a check may look at. Tensors stay alive until every check has judged. */
export interface CheckContext {
  cell: Cell;
  backend: Backend;
  /** What the subject said of itself (the judge never holds the subject's code). */
  subject: Pick<Subject, "name" | "tolerance" | "shape">;
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
  /** Per rank, the ranks whose data reached it through collectives (World.reach); null from an external runtime. */
  reach: number[][] | null;
  /**
   * What p's copy must hold, scaled, after the clip: the logical gradient of its logical parameter, or
   * for a copy placed Partial(sum) its own partial (DTensor scales a Partial tensor's local partial).
   */
  genSpec(p: LocalParam): GenSpec;
  /** The logical gradient of p's logical parameter (the sum of the partials for a Partial one). */
  logicalSpec(p: LocalParam): GenSpec;
  /**
   * What p's copy was filled with before the clip: genSpec(p), except an optimizer-shaped subject's
   * tied copies (raw partials: gradients/specs.ts).
   */
  inputSpec(p: LocalParam): GenSpec;
  repro: string;
  budgets: Budgets;
}

/**
 * What a case shows before it runs (its reference, regime and default plan), as the coverage planner
 * computes it (matrix/coverage.ts caseFacts): what a check's `canFail` reads.
 */
export interface CanFailFacts {
  world: number;
  /** Logical parameters with a gradient. */
  paramsWithGrad: number;
  referenceFinite: boolean;
  clipCoef: number;
  errorIfNonfinite: boolean;
  /** Some tied parameter has a replica on another stage, with a gradient. */
  tiedReplica: boolean;
}

/** What every check says of itself: its id, what it catches, and on which cases it can fail at all. */
export interface CheckInfo {
  id: string;
  /** One line: what it catches. */
  description: string;
  /** What its failure means (results/types.ts Severity): a wrong result, or a right one that costs more than it must. */
  severity: Severity;
  /**
   * Whether some subject can fail it on a case with these facts (what it judges is there to be judged):
   * the coverage planner requires every check to be able to fail on some case of a matrix.
   */
  canFail(facts: CanFailFacts): boolean;
}

/** A check judged from one cell's tensors, norms, memory and collectives. */
export interface Check extends CheckInfo {
  judge(ctx: CheckContext): CheckResult;
}

/** A check whose every result carries its severity, so that a reporter never has to guess it from the id. */
export function defineCheck(check: Check): Check {
  const judge = check.judge;
  return {
    ...check,
    judge(ctx) {
      return { ...judge.call(this, ctx), severity: check.severity };
    },
  };
}

/** Gradients that a correct clip must scale (clip_coef < 1 on a finite norm): where a scaling check can fail. */
export const scaled = (f: CanFailFacts): boolean => f.paramsWithGrad > 0 && f.referenceFinite && f.clipCoef < 1;

export const pass = (id: string, message = ""): CheckResult => ({ id, status: "pass", message });
export const fail = (id: string, message: string): CheckResult => ({ id, status: "fail", message });
export const skip = (id: string, message: string): CheckResult => ({ id, status: "skip", message });

/**
 * In the `bf16` class on bfloat16 or float16 gradients, the coefficients a rank may have scaled by instead of
 * the float32 one: held in the gradients' dtype, computed from its own norm as PyTorch's clips compute them
 * (checks/low-precision.ts); empty in every other case.
 */
export function lowPrecisionCoefs(ctx: Pick<CheckContext, "tolerance" | "cell" | "maxNorm">, norm: number): number[] {
  const dtype = lowPrecisionDtype(ctx);
  if (!dtype) return [];
  return [...new Set([clipCoefficientIn(dtype, ctx.maxNorm, norm), ...roundedCoefficients(dtype, ctx.maxNorm, norm)])];
}

/** The gradients' dtype when coefficients held in it are accepted (lowPrecisionCoefs), else null. */
export function lowPrecisionDtype(ctx: Pick<CheckContext, "tolerance" | "cell">): "bf16" | "f16" | null {
  const dtype = ctx.cell.dtype;
  return ctx.tolerance === "bf16" && dtype !== "f32" ? dtype : null;
}

/** Ranks whose clip did not return a norm, as a reason to skip value checks. */
export function notComparable(ctx: CheckContext): string | null {
  if (ctx.backend.isMeta) return "the meta backend holds no values";
  if (ctx.liveness) return "liveness failed";
  const threw = ctx.outcomes.filter((o) => o.error);
  if (threw.length) return `rank ${threw[0].rank} raised: ${threw[0].error!.message}`;
  return null;
}

/**
 * How far a norm may be from the reference, relative to it, in each class whose bound is one number
 * (SPEC §6): exact: bitwise; fp32: 4 ulp of float32; bf16: 4 ulp of bfloat16.
 */
export const NORM_TOLERANCE: Readonly<Record<Exclude<ToleranceClass, "fp32-accum">, number>> = Object.freeze({ exact: 0, fp32: 4 * 2 ** -24, bf16: 4 * 2 ** -8 });

/** The unit roundoff of float32. */
const U32 = 2 ** -24;

/**
 * λ of the fp32-accum bound: the bound holds with probability at least 1 - 2 n exp(-λ^2 (1-u)^2 / 2)
 * (Higham and Mary 2019, Theorem 3.1); with λ = 8 that is above 1 - 1e-5 for every n up to 2^26
 * terms, four times the largest cell here (deepseek-v3-debug's 38,670,080 elements).
 */
export const FP32_ACCUM_LAMBDA = 8;

/**
 * The fp32-accum class's bound on |norm - ref| / ref, for a norm whose p-th power sums `elements`
 * terms in float32 in any order (README "The fp32-accum class" has the derivation):
 *   S  = sum of n terms t_i = |g_i|^p, each computed in float32 (one rounding, exact for p = 1);
 *   |S^ - S| <= (λ sqrt(n + 1) u + O(u^2)) S   (probabilistic bound for any summation order of
 *                                               nonnegative terms, the +1 for the terms' own rounding);
 *   norm = S^(1/p): its relative error is the sum's over p, plus the fp32 class's 4 u for the root,
 *   its rounding to float32 and the reference's.
 * For the inf-norm nothing is summed: a max rounds nothing, so the bound is the fp32 class's.
 */
export function fp32AccumBound(normType: number, elements: number): number {
  if (normType === Infinity || elements === 0) return NORM_TOLERANCE.fp32;
  return (FP32_ACCUM_LAMBDA * Math.sqrt(elements + 1) * U32) / normType + NORM_TOLERANCE.fp32;
}

/** The bound on |norm - ref| / ref a class allows on a cell whose norm sums `elements` terms at `normType`. */
export function normTolerance(tolerance: ToleranceClass, normType: number, elements: number): number {
  return tolerance === "fp32-accum" ? fp32AccumBound(normType, elements) : NORM_TOLERANCE[tolerance];
}

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

/**
 * Exact sums of |g|^p as integers scaled by 2^-1074 (every float64 is an integer multiple of
 * 2^-1074), so partial sums from any rank add in any order without rounding, and the total is
 * rounded to float64 exactly once.
 */
import type { Exact } from "../subject/api.ts";

export const EXACT_SCALE_BITS = 1074;
export const EXACT_ZERO: Exact = Object.freeze({ sum: 0n, nonfinite: 0 });

export function exactAdd(a: Exact, b: Exact): Exact {
  return { sum: a.sum + b.sum, nonfinite: a.nonfinite + b.nonfinite };
}

function bitLength(n: bigint): number {
  return n === 0n ? 0 : n.toString(2).length;
}

/** Rounds sum * 2^-1074 to the nearest float64 (ties to even), once. */
export function exactToNumber(x: Exact): number {
  if (x.nonfinite !== 0) return x.nonfinite; // +Inf, or NaN (Inf + NaN is NaN)
  return scaledBigIntToNumber(x.sum, EXACT_SCALE_BITS);
}

/** n * 2^-scale rounded once to float64, for n >= 0. */
export function scaledBigIntToNumber(n: bigint, scale: number): number {
  if (n < 0n) return -scaledBigIntToNumber(-n, scale);
  if (n === 0n) return 0;
  const len = bitLength(n);
  // Keep 62 significant bits plus a sticky bit: Number() of that rounds to nearest-even exactly as
  // rounding n itself would, because the sticky bit sits well below float64's rounding position.
  let shift = 0;
  let top = n;
  if (len > 62) {
    shift = len - 62;
    const dropped = n & ((1n << BigInt(shift)) - 1n);
    top = (n >> BigInt(shift)) | (dropped !== 0n ? 1n : 0n);
  }
  const e = shift - scale; // value = top * 2^e
  const lead = len - 1 - scale; // exponent of the value's leading bit
  if (lead < -1022) {
    // Subnormal result: round at the fixed 2^-1074 quantum directly, ties to even.
    const q = roundShiftRightEven(n, scale - 1074);
    return Number(q) * 2 ** -1074;
  }
  return mulPow2(Number(top), e);
}

function roundShiftRightEven(n: bigint, k: number): bigint {
  if (k <= 0) return n << BigInt(-k);
  const b = BigInt(k);
  const q = n >> b;
  const r = n - (q << b);
  const half = 1n << (b - 1n);
  if (r > half || (r === half && (q & 1n) === 1n)) return q + 1n;
  return q;
}

/** v * 2^e without intermediate overflow or underflow of the power. */
function mulPow2(v: number, e: number): number {
  let out = v;
  let k = e;
  while (k > 1000) {
    out *= 2 ** 1000;
    k -= 1000;
  }
  while (k < -1000) {
    out *= 2 ** -1000;
    k += 1000;
  }
  return out * 2 ** k;
}

/**
 * A clip coefficient computed the way PyTorch computes it from a norm held in bfloat16 or float16
 * (`clip_grads_with_norm_` on the norm `get_total_norm` returns for such gradients): each tensor operation
 * in float32 and rounded to the dtype, `max_norm / t` being `t.reciprocal() * max_norm`. The `bf16` class
 * accepts a rank whose gradients are scaled by this coefficient as well as by the float32 one (SPEC §6: the
 * coefficient from the subject's own norm; this one differs from it by three roundings to the dtype, at
 * most about 3 x 2^-8 relative in bfloat16, inside the class's own norm tolerance of 4 x 2^-8).
 */
import { toBf16 } from "./common.ts";

/** Rounds a float32 value to float16 (round to nearest, ties to even); overflow gives ±Inf, NaN stays NaN. */
export function toF16(x: number): number {
  if (!Number.isFinite(x) || x === 0) return x;
  const a = Math.abs(x);
  if (a >= 65520) return Math.sign(x) * Infinity; // at or past the midpoint above 65504, the largest float16
  let e = Math.max(-14, Math.floor(Math.log2(a))); // below 2^-14 the subnormal quantum 2^-24
  if (e > -14 && 2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  const q = 2 ** (e - 10);
  const m = a / q; // exact: a is a float32, q a power of two
  const lo = Math.floor(m);
  const r = m - lo > 0.5 || (m - lo === 0.5 && lo % 2 === 1) ? lo + 1 : lo;
  return Math.sign(x) * r * q;
}

/** clip_coef = clamp(max_norm / (total_norm + 1e-6), max=1) with each operation rounded to `dtype`. */
export function clipCoefficientIn(dtype: "bf16" | "f16", maxNorm: number, totalNorm: number): number {
  const round = dtype === "bf16" ? toBf16 : toF16;
  const f32 = Math.fround;
  const denominator = round(f32(f32(totalNorm) + f32(1e-6)));
  const coef = round(f32(round(f32(1 / denominator)) * f32(maxNorm)));
  return Number.isNaN(coef) ? coef : Math.min(1, coef);
}

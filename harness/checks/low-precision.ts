/**
 * Clip coefficients held in bfloat16 or float16, as PyTorch's clips compute them for such gradients. The
 * `bf16` class accepts a rank whose gradients are all scaled by one of them as well as by the float32
 * coefficient of its own norm (SPEC §6); each differs from that one by roundings to the dtype (at most about
 * 3 x 2^-8 relative in bfloat16), inside the class's own norm tolerance of 4 x 2^-8:
 * - computed in the dtype (`clip_grads_with_norm_` on the norm `get_total_norm` returns for such gradients):
 *   each tensor operation in float32 and rounded to the dtype, `max_norm / t` being `t.reciprocal() * max_norm`;
 * - computed in float32 from a float32 norm, then rounded to the dtype, the norm itself returned rounded to it
 *   (FSDP1's `clip_grad_norm_`: `clip_coef_clamped.to(grad.dtype)`, `total_norm.to(total_norm_dtype)`): the
 *   rank's float32 norm is then known only to within half a dtype ulp of the norm it returned.
 */
import { clipCoefficient } from "../numerics/numerics.ts";
import { toBf16 } from "../numerics/numerics.ts";

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

/** The dtype's spacing at |x| (a normal bfloat16 has 8 significant bits, a float16 11, down to 2^-14). */
function ulpIn(dtype: "bf16" | "f16", x: number): number {
  const e = Math.floor(Math.log2(Math.abs(x)));
  return dtype === "bf16" ? 2 ** (e - 7) : 2 ** (Math.max(e, -14) - 10);
}

/**
 * Every `dtype` value that round(float32 coefficient of n) takes over the float32 norms n that round to
 * `totalNorm` in the dtype (within half its ulp): the coefficients of a clip that computed its norm and
 * coefficient in float32 and rounded both to the dtype. Ascending; empty for a norm that is not finite and
 * positive (the coefficient is then 1 or NaN, which the float32 rule already covers).
 */
export function roundedCoefficients(dtype: "bf16" | "f16", maxNorm: number, totalNorm: number): number[] {
  if (!(totalNorm > 0) || !Number.isFinite(totalNorm)) return [];
  const round = dtype === "bf16" ? toBf16 : toF16;
  const half = ulpIn(dtype, totalNorm) / 2;
  const lo = round(clipCoefficient(maxNorm, totalNorm + half));
  const hi = round(clipCoefficient(maxNorm, totalNorm - half));
  const out: number[] = [];
  for (let c = lo; c <= hi && out.length < 8; c = c + ulpIn(dtype, c)) out.push(c);
  return out;
}

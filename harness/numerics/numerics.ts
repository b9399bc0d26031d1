/**
 * The float rules that subjects and the checks that judge them share: PyTorch's clip coefficient, the
 * norm from a power sum (SPEC §6), the rounding to bfloat16. One definition, imported by both sides, so
 * a check never borrows a helper from the code it judges (a subject's bug in a copy would hide there).
 */

/**
 * The float32 clip coefficient exactly as PyTorch computes it:
 * clamp(max_norm / (total_norm + 1e-6), max=1.0), every operation in float32.
 */
export function clipCoefficient(maxNorm: number, totalNorm: number): number {
  const f32 = Math.fround;
  const coef = f32(f32(maxNorm) / f32(f32(totalNorm) + f32(1e-6)));
  return Number.isNaN(coef) ? coef : Math.min(1, coef);
}

/** total = S^(1/p) in float64, then rounded to float32 (SPEC §6). */
export function normFromPowerSum(s: number, normType: number): number {
  if (normType === Infinity || normType === 1) return Math.fround(s);
  if (normType === 2) return Math.fround(Math.sqrt(s));
  return Math.fround(s ** (1 / normType));
}

// Stryker disable all: toBf16 is out of the mutation scope (as it was in subject/common.ts):
// suites/unit/subjects.test.ts tests it directly against the native conversion.
/**
 * Rounds to bfloat16 (round to nearest, ties to even) the way PyTorch does from a float32 value:
 * add 0x7FFF plus the lowest kept bit, then drop the low 16 bits. NaN stays NaN; overflow gives ±Inf.
 */
export function toBf16(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  const bits = u[0]!;
  u[0] = ((bits + 0x7fff + ((bits >>> 16) & 1)) & 0xffff0000) >>> 0;
  return f[0]!;
}
// Stryker restore all

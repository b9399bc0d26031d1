/**
 * The bf16 class's other coefficients (harness/checks/low-precision.ts), pinned value by value: a cell of
 * the suite shows only whether some coefficient matched, not which, so a wrong rounding here would widen
 * or narrow what the class accepts unnoticed.
 */
import { describe, expect, it } from "vitest";
import { clipCoefficientIn, roundedCoefficients, toF16 } from "../../harness/checks/low-precision.ts";
import { clipCoefficient } from "../../harness/subject/api.ts";
import { toBf16 } from "../../harness/numerics/numerics.ts";

describe("float16 rounding", () => {
  it("rounds to nearest, ties to even, with subnormals down to 2^-24 and overflow to Inf", () => {
    expect(toF16(1)).toBe(1);
    expect(toF16(1 + 2 ** -11)).toBe(1); // a tie: to the even neighbour
    expect(toF16(1 + 3 * 2 ** -11)).toBe(1 + 2 ** -9); // a tie: up to the even one
    expect(toF16(1 + 2 ** -11 + 2 ** -20)).toBe(1 + 2 ** -10);
    expect(toF16(-3)).toBe(-3);
    expect(toF16(65504)).toBe(65504);
    expect(toF16(65519)).toBe(65504);
    expect(toF16(65520)).toBe(Infinity);
    expect(toF16(-70000)).toBe(-Infinity);
    expect(toF16(2 ** -24)).toBe(2 ** -24);
    expect(toF16(3 * 2 ** -25)).toBe(2 ** -23);
    expect(toF16(2 ** -26)).toBe(0);
    expect(toF16(2 ** -14 * 1.5)).toBe(2 ** -14 * 1.5);
    expect(toF16(1 / 3)).toBe(1365 / 4096);
    expect(toF16(0)).toBe(0);
    expect(toF16(NaN)).toBeNaN();
  });
});

describe("the coefficient computed in the gradients' dtype", () => {
  it("clamps at 1, rounds the reciprocal and the product to the dtype, and keeps NaN", () => {
    expect(clipCoefficientIn("bf16", 1, 0.5)).toBe(1);
    expect(clipCoefficientIn("bf16", 1, 3)).toBe(0.333984375);
    expect(clipCoefficientIn("f16", 1, 3)).toBe(1365 / 4096);
    expect(clipCoefficientIn("bf16", 0.5, 3)).toBe(0.333984375 / 2);
    expect(clipCoefficientIn("bf16", 1, NaN)).toBeNaN();
  });
});

describe("the float32 coefficient rounded to the dtype, over the norms the returned one stands for", () => {
  for (const dtype of ["bf16", "f16"] as const) {
    const round = dtype === "bf16" ? toBf16 : toF16;
    it(`${dtype}: ascending values of the dtype around the norm's own coefficient, at most 8`, () => {
      const cs = roundedCoefficients(dtype, 1, 3);
      expect(cs).toContain(round(clipCoefficient(1, 3)));
      expect(cs.length).toBeGreaterThan(1);
      expect(cs.length).toBeLessThanOrEqual(8);
      for (const c of cs) expect(round(c)).toBe(c);
      for (let i = 1; i < cs.length; i++) expect(cs[i]).toBeGreaterThan(cs[i - 1]!);
      expect(cs[0]).toBe(round(clipCoefficient(1, 3 + (dtype === "bf16" ? 2 ** -7 : 2 ** -10))));
      expect(cs.at(-1)).toBe(round(clipCoefficient(1, 3 - (dtype === "bf16" ? 2 ** -7 : 2 ** -10))));
    });
  }

  it("none for a norm that is not finite and positive", () => {
    for (const n of [0, -1, NaN, Infinity]) expect(roundedCoefficients("bf16", 1, n)).toEqual([]);
  });
});

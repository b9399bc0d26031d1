/**
 * Edges of the reference and of the checks' helpers that no cell reaches (surviving mutants of the scoped
 * Stryker run, docs/strength.md): the reference cache's key fields kept apart, the dtype coefficient's
 * epsilon where it is not negligible, the cap on how many dtype coefficients are tried.
 */
import { describe, expect, it } from "vitest";
import { computeReference } from "../../harness/gradients/reference.ts";
import { fuzzManifest, validateCase } from "../../harness/fuzz/case.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { clipCoefficientIn, roundedCoefficients } from "../../harness/checks/low-precision.ts";
import { toBf16 } from "../../harness/numerics/numerics.ts";

const model = fuzzManifest(
  validateCase({
    subject: "x",
    layout: parseLayout("dp_shard2"),
    dtype: "f32",
    normType: 2,
    regime: "active",
    seed: 0,
    params: [{ name: "w", shape: [5], stage: 0, mesh: "dense", axes: [], placements: [], replicas: [] }],
  }),
);

describe("the reference cache", () => {
  it("keeps the key's fields apart: seed 1 at step 11 is not seed 11 at step 1", () => {
    const a = computeReference(model, "f32", 2, "active", 1, 11);
    const b = computeReference(model, "f32", 2, "active", 11, 1);
    expect(a.totalNorm).not.toBe(b.totalNorm);
  });
});

describe("a coefficient held in a low-precision dtype", () => {
  it("adds the 1e-6 to the norm where it shows (a norm of 1e-6: the coefficient is about a half, not 1)", () => {
    const f32 = Math.fround;
    const round = toBf16;
    const want = round(f32(round(f32(1 / round(f32(f32(1e-6) + f32(1e-6))))) * f32(1e-6)));
    expect(clipCoefficientIn("bf16", 1e-6, 1e-6)).toBe(want);
    expect(want).toBeLessThan(0.6);
  });

  it("at most 8 coefficients are tried, even where the dtype's spacing is 0 (max_norm 0)", () => {
    expect(roundedCoefficients("bf16", 0, 1)).toEqual(new Array(8).fill(0));
  });
});

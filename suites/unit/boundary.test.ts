/**
 * The boundary regime gives no oracle (issue 21): max_norm lies below, on and above the reference norm,
 * some of it outside the fp32 class's band, so a subject cannot answer from max_norm.
 */
import { describe, expect, it } from "vitest";
import { boundaryOffset, f32Ulps, f32UlpsBetween, maxNormOf } from "../../harness/gradients/regimes.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { builtinMatrices } from "../../matrix/index.ts";

describe("boundary max_norm", () => {
  it("the boundary cells of the cpu matrix put max_norm below, on and above the norm, some outside the fp32 band", () => {
    const offsets = new Set(builtinMatrices().cpu!.cases.filter((c) => c.regime === "boundary" && c.maxNorm === undefined).map((c) => boundaryOffset(c)));
    expect([...offsets].some((k) => k < 0)).toBe(true);
    expect(offsets.has(0)).toBe(true);
    expect([...offsets].some((k) => k > 0)).toBe(true);
    expect([...offsets].some((k) => Math.abs(k) > 4)).toBe(true);
  });


  it("is the same for every subject of a cell and for the same layout spelled two ways; an explicit max_norm wins", () => {
    const c = { regime: "boundary", seed: 0, model: "llama3-debug", dtype: "f32", normType: 2, layout: parseLayout("tp2,pp2") };
    expect(maxNormOf(c, 100)).toBe(maxNormOf({ ...c, layout: parseLayout("pp2,tp2") }, 100));
    expect(maxNormOf({ ...c, maxNorm: 3 }, 100)).toBe(3);
    expect(maxNormOf({ ...c, regime: "active" }, 100)).toBe(1);
  });
});

describe("float32 ulps", () => {
  it("f32UlpsBetween undoes f32Ulps, across a binade too, and is null off positive finite float32 values", () => {
    for (const x of [Math.fround(0.1), 1, Math.fround(3.999999), 2 ** -20, Math.fround(1e30)]) {
      for (const k of [-3, -1, 0, 1, 2, 7]) expect(f32UlpsBetween(x, f32Ulps(x, k)), `${x} ${k}`).toBe(k);
    }
    expect(f32UlpsBetween(Math.fround(2 - 2 ** -23), 2)).toBe(1);
    for (const [a, b] of [[0, 1], [1, Infinity], [-1, 1], [0.1, 1], [1, NaN]]) expect(f32UlpsBetween(a!, b!)).toBeNull();
  });
});

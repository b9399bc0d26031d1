/**
 * The helpers every check judges with (harness/checks/types.ts), pinned where a cell would not notice a
 * change: the tolerance of each class, the fp32-accum bound, the element a failure message names, when two
 * norms count as one, and why a value check skips.
 */
import { describe, expect, it } from "vitest";
import { fp32AccumBound, globalIndex, normTolerance, notComparable, NORM_TOLERANCE, pass, sameNorm, type CheckContext } from "../../harness/checks/types.ts";

describe("check helpers", () => {
  it("each class's norm tolerance: exact bitwise, fp32 4 float32 ulp, bf16 4 bfloat16 ulp", () => {
    expect(NORM_TOLERANCE).toEqual({ exact: 0, fp32: 4 * 2 ** -24, bf16: 4 * 2 ** -8 });
    expect(normTolerance("fp32", 2, 1000)).toBe(4 * 2 ** -24);
  });

  it("fp32-accum's bound grows with sqrt(n + 1) / p, and is fp32's for the inf-norm or nothing summed", () => {
    expect(fp32AccumBound(2, 99)).toBe((8 * 10 * 2 ** -24) / 2 + 4 * 2 ** -24);
    expect(normTolerance("fp32-accum", 1, 99)).toBe(8 * 10 * 2 ** -24 + 4 * 2 ** -24);
    expect(fp32AccumBound(Infinity, 99)).toBe(4 * 2 ** -24);
    expect(fp32AccumBound(2, 0)).toBe(4 * 2 ** -24);
  });

  it("a failure names the global row-major index of a local element", () => {
    const block = { globalShape: [4, 6], start: [2, 3], len: [2, 3] };
    expect(globalIndex(block, 0)).toBe(2 * 6 + 3);
    expect(globalIndex(block, 4)).toBe(3 * 6 + 4); // local (1, 1)
    expect(globalIndex({ globalShape: [2, 3, 5], start: [1, 0, 2], len: [1, 3, 3] }, 7)).toBe(1 * 15 + 2 * 5 + 3); // local (0, 2, 1)
  });

  it("two norms are one when bitwise equal, NaN with NaN, or 0 with -0", () => {
    expect(sameNorm(NaN, NaN)).toBe(true);
    expect(sameNorm(0, -0)).toBe(true);
    expect(sameNorm(1.5, 1.5)).toBe(true);
    expect(sameNorm(1.5, Math.fround(1.5 + 2 ** -23))).toBe(false);
    expect(sameNorm(NaN, 1)).toBe(false);
  });

  it("a value check skips with the reason: the meta backend, a liveness failure, then the first rank that raised", () => {
    const ctx = (over: object) => ({ backend: { isMeta: false }, liveness: null, outcomes: [{ rank: 0 }, { rank: 1, error: new Error("boom") }], ...over }) as unknown as CheckContext;
    expect(notComparable(ctx({ backend: { isMeta: true } }))).toBe("the meta backend holds no values");
    expect(notComparable(ctx({ liveness: "hang" }))).toBe("liveness failed");
    expect(notComparable(ctx({}))).toBe("rank 1 raised: boom");
    expect(notComparable(ctx({ outcomes: [{ rank: 0 }] }))).toBeNull();
    expect(pass("x")).toEqual({ id: "x", status: "pass", message: "" });
  });
});

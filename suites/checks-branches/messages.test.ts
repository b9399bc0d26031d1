/**
 * What each check says, and its verdict at the edges a cell does not reach, on hand-built contexts
 * (./context.ts) with a stand-in backend where a check reads tensors: the surviving mutants of the scoped
 * Stryker run over harness/checks (docs/strength.md). A failure message is a check's output as much as its
 * status: the report and the CLI show it, and a wrong number or an empty rule there misleads the reader.
 */
import { describe, expect, it } from "vitest";
import { clipCoefficient } from "../../harness/subject/api.ts";
import parityNorm from "../../harness/checks/parity-norm.ts";
import parityTensors from "../../harness/checks/parity-tensors.ts";
import memoryPeak from "../../harness/checks/memory-peak.ts";
import commReach from "../../harness/checks/comm-reach.ts";
import errorsNonfinite from "../../harness/checks/errors-nonfinite.ts";
import scalingReplicas from "../../harness/checks/scaling-replicas.ts";
import scalingNonempty from "../../harness/checks/scaling-nonempty.ts";
import { goldenCheck } from "../../harness/checks/golden.ts";
import { isolationCheck } from "../../harness/checks/isolation.ts";
import { fp32AccumBound, type CheckContext } from "../../harness/checks/types.ts";
import { DEFAULT_SCRATCH_SLACK_BYTES } from "../../harness/cell/cell.ts";
import { ctxOf, memory, outcomes } from "./context.ts";

const judge = (check: { judge(ctx: CheckContext): unknown }, ctx: CheckContext) => check.judge(ctx) as { id: string; status: string; message: string };

describe("parity.norm says what was wrong", () => {
  const norms = (tolerance: CheckContext["tolerance"], ref: number, ...values: (number | Error)[]) =>
    judge(parityNorm, ctxOf({ tolerance, reference: { powerSum: ref * ref, totalNorm: ref, paramsWithGrad: 1, elementsWithGrad: 99 }, outcomes: outcomes(...values) }));

  it("the relative error and the class, or fp32-accum's bound for the cell's element count", () => {
    expect(norms("fp32", 1, 1, 1.5).message).toBe("rank 1: total norm 1.5 != reference 1 (relative error 5.000e-1, tolerance fp32)");
    expect(norms("fp32", 2, 2, 3).message).toBe("rank 1: total norm 3 != reference 2 (relative error 5.000e-1, tolerance fp32)");
    expect(norms("fp32-accum", 1, 1.5).message).toBe(`rank 0: total norm 1.5 != reference 1 (relative error 5.000e-1, tolerance fp32-accum: ${fp32AccumBound(2, 99).toExponential(3)} for 99 elements)`);
    expect(norms("fp32", 0, 0, 0.5).message).toBe("rank 1: total norm 0.5 != reference 0 (relative error Infinity, tolerance fp32)");
  });

  it("a float64 norm: why it fails", () => {
    expect(norms("fp32", 1, 1 + 2 ** -40).message).toBe(
      `rank 0 returned ${1 + 2 ** -40}, which is not a float32 value (the nearest float32 is 1): the total norm must be returned as float32`,
    );
  });

  it("exactly at the bound passes (the bound is inclusive)", () => {
    // a power-of-two reference and a bound of 4 float32 ulp of 1: 1 + 2^-22 is 2 ulp of float32 above 1, 4 x 2^-24 relative
    expect(norms("fp32", 1, 1 + 4 * 2 ** -24).status).toBe("pass");
  });

  it("a non-finite reference is compared bitwise whatever the class: a finite norm against Inf fails", () => {
    expect(norms("fp32", Infinity, 1).status).toBe("fail");
    expect(norms("fp32", Infinity, Infinity).status).toBe("pass");
  });

  it("a raise is expected only where the cell asks for it and the norm is not finite; elsewhere it is errors.raised's to report", () => {
    const raised = (errorIfNonfinite: boolean, ref: number) =>
      judge(parityNorm, ctxOf({ errorIfNonfinite, reference: { powerSum: 1, totalNorm: ref, paramsWithGrad: 1, elementsWithGrad: 1 }, outcomes: outcomes(new Error("boom")) }));
    expect(raised(true, 1)).toMatchObject({ status: "skip", message: "rank 0 raised (errors.raised)" });
    expect(raised(false, NaN)).toMatchObject({ status: "skip", message: "rank 0 raised (errors.raised)" });
    expect(raised(true, NaN).status).toBe("pass");
  });
});

describe("memory.peak says which budget", () => {
  const over = (budgets: CheckContext["budgets"], m: Partial<Parameters<typeof memory>[1]> = {}) =>
    judge(memoryPeak, ctxOf({ budgets, memory: [memory(0, { scratchPeakBytes: 10, budgetBytes: 100 }), memory(1, { scratchPeakBytes: 2048, budgetBytes: 1024, ...m })] }));

  it("the rule by which the budget was set", () => {
    expect(over({}).message).toBe("rank 1: scratch peak 2,048 bytes during the clip > budget 1,024 bytes (float32 size of its largest local shard + 1 MiB)");
    expect(over({ scratchSlackBytes: DEFAULT_SCRATCH_SLACK_BYTES }).message).toMatch(/\+ 1 MiB\)$/);
    expect(over({ scratchSlackBytes: 64 }).message).toMatch(/\(float32 size of its largest local shard \+ 64 bytes\)$/);
    expect(over({ scratchSlackBytes: 4096, scratchBytes: 1024 }).message).toMatch(/ \(the matrix's budget\)$/);
    expect(over({}, { budgetRule: "the design's own rule" }).message).toMatch(/ \(the design's own rule\)$/);
  });

  it("a peak equal to the budget is within it; the pass says the largest peak", () => {
    expect(over({}, { scratchPeakBytes: 1024 })).toMatchObject({ id: "memory.peak", status: "pass", message: "max scratch 1,024 bytes" });
    expect(judge(memoryPeak, ctxOf({ memory: [] })).message).toBe("max scratch 0 bytes");
  });
});

describe("errors.nonfinite", () => {
  const nan = { powerSum: NaN, totalNorm: NaN, paramsWithGrad: 1, elementsWithGrad: 1 };
  it("takes torch's 'nonfinite' spelling too, and names the ranks that went on", () => {
    expect(judge(errorsNonfinite, ctxOf({ errorIfNonfinite: true, reference: nan, outcomes: outcomes(new Error("The total norm is nonfinite"), new Error("non-finite")) })).status).toBe("pass");
    expect(judge(errorsNonfinite, ctxOf({ errorIfNonfinite: true, reference: nan, outcomes: outcomes(new Error("non-finite"), NaN, NaN) })).message).toBe(
      "the norm is NaN but rank(s) 1,2 returned NaN instead of raising",
    );
  });
});

describe("golden and isolation pass with nothing to say", () => {
  it("an empty message", () => {
    expect(goldenCheck(null, true, "golden/cpu.json", "x")).toMatchObject({ id: "golden", status: "pass", message: "" });
    expect(isolationCheck(null)).toMatchObject({ id: "isolation", status: "pass", message: "" });
  });
});

// ---- comm.reach on hand-built plans ------------------------------------------------------------------

/** A local copy of `name` holding the block at `start` of `len` (numel given: the check sums it). */
const copyOf = (name: string, globalShape: number[], start: number[], len: number[], numel = len.reduce((a, b) => a * b, 1)) =>
  ({ name, fqn: name, canonical: true, block: { globalShape, start, len }, numel }) as unknown as CheckContext["plan"][number][number];
const G = {} as never; // a gradient: present

describe("comm.reach counts what reached a rank", () => {
  const reach = (plan: CheckContext["plan"], grads: CheckContext["grads"], r: number[][], values: (number | Error | undefined)[] = plan.map(() => 1)) =>
    judge(commReach, ctxOf({ plan, grads, reach: r, outcomes: outcomes(...values) }));

  it("the elements of a 2-d parameter (not its first dim over the second), and says what was missing", () => {
    const plan = [[copyOf("w", [2, 3], [0, 0], [1, 3])], [copyOf("w", [2, 3], [1, 0], [1, 3])]];
    expect(reach(plan, [[G], [G]], [[0, 1], [0, 1]]).status).toBe("pass");
    expect(reach(plan, [[G], [G]], [[0, 1], [1]]).message).toBe(
      "rank 1 returned a norm (1), but the collectives it completed joined it only to ranks [1], which hold 3 of the 6 elements of w: the rest it cannot have known",
    );
  });

  it("names every rank a rank was joined to, comma-separated", () => {
    const plan = [[copyOf("w", [6], [0], [2])], [copyOf("w", [6], [2], [2])], [copyOf("w", [6], [4], [2])]];
    expect(reach(plan, [[G], [G], [G]], [[0, 1], [0, 1], [0, 1, 2]], [1, undefined, undefined]).message).toMatch(/joined it only to ranks \[0,1\], which hold 4 of the 6 elements/);
  });

  it("a parameter with no gradient anywhere is not needed", () => {
    const plan = [[copyOf("w", [4], [0], [4]), copyOf("frozen", [4], [0], [2])], [copyOf("w", [4], [0], [4]), copyOf("frozen", [4], [2], [2])]];
    expect(reach(plan, [[G, null], [G, null]], [[0], [1]]).status).toBe("pass");
  });

  it("a copy without a gradient on a reached rank counts nothing", () => {
    const plan = [[copyOf("w", [4], [0], [2])], [copyOf("w", [4], [2], [2])], [copyOf("w", [4], [2], [2])]];
    // rank 0 reached rank 2, whose copy has no gradient: half of w never reached it
    expect(reach(plan, [[G], [G], [null]], [[0, 2], [1], [2]], [1, undefined, undefined]).status).toBe("fail");
  });

  it("a replica's elements count once: two ranks holding the same half hold half", () => {
    const plan = [[copyOf("w", [8], [0], [4])], [copyOf("w", [8], [0], [4])]];
    expect(reach(plan, [[G], [G]], [[0, 1], [0, 1]]).message).toMatch(/which hold 4 of the 8 elements of w/);
  });

  it("blocks are told apart by every coordinate of their start and length", () => {
    // (1, 11) and (11, 1): the same digits; a key that joined them without a separator would count one of them twice
    const starts = [[copyOf("w", [12, 12], [1, 11], [1, 1], 72)], [copyOf("w", [12, 12], [11, 1], [1, 1], 72)]];
    expect(reach(starts, [[G], [G]], [[0, 1], [0, 1]]).status).toBe("pass");
    const lens = [[copyOf("w", [12, 12], [0, 0], [1, 11], 72)], [copyOf("w", [12, 12], [0, 0], [11, 1], 72)]];
    expect(reach(lens, [[G], [G]], [[0, 1], [0, 1]]).status).toBe("pass");
  });

  it("a rank that raised or returned no number is not judged; a rank with no reach entry holds its own", () => {
    const plan = [[copyOf("w", [4], [0], [2])], [copyOf("w", [4], [2], [2])]];
    expect(reach(plan, [[G], [G]], [[0], [1]], [new Error("x"), undefined]).status).toBe("pass");
    const whole = [[copyOf("w", [4], [0], [4])], [copyOf("w", [4], [0], [4])]];
    expect(reach(whole, [[G], [G]], [[0]]).status).toBe("pass");
  });
});

// ---- checks that read tensors, on a stand-in backend --------------------------------------------------

/**
 * A stand-in backend whose "tensors" are numbers: a gradient holds the coefficient it was scaled by (1: not
 * scaled), and verifyScaled passes when that is the coefficient asked for.
 */
type T = { v: number };
const mism = (actual: number, expected: number) => ({ index: 0, actual, expected });
const fakeBackend = {
  isMeta: false,
  verifyScaled: (t: T, _gen: unknown, _block: unknown, coef: number) => (t.v === coef ? null : mism(t.v, coef)),
  verifyScaledMany(items: { tensor: T; coef: number }[]) {
    const i = items.findIndex((it) => it.tensor.v !== it.coef);
    return i < 0 ? null : { item: i, mismatch: mism(items[i]!.tensor.v, items[i]!.coef) };
  },
  compare: (a: T, b: T) => (a.v === b.v ? null : mism(b.v, a.v)),
} as unknown as CheckContext["backend"];

const tied = (name: string, canonical: boolean, start = [0], len = [2]) =>
  ({ name, fqn: canonical ? name : `${name}.replica`, canonical, tieGroup: name, block: { globalShape: [2], start, len }, numel: 2 }) as unknown as CheckContext["plan"][number][number];

describe("scaling.replicas compares a replica with its canonical copy", () => {
  // maxNorm 1, each rank's norm 2: its coefficient is 1 / (2 + 1e-6)
  const run = (plan: CheckContext["plan"], grads: T[][]) =>
    judge(scalingReplicas, ctxOf({ backend: fakeBackend, plan, grads: grads as never, outcomes: outcomes(2, 2), genSpec: () => ({}) as never }));

  it("a replica equal to its canonical copy passes, whatever the rank's own coefficient would give", () => {
    expect(run([[tied("e", true)], [tied("e", false)]], [[{ v: 0.3 }], [{ v: 0.3 }]])).toMatchObject({ id: "scaling.replicas", status: "pass", message: "1 replica shards" });
  });

  it("a replica that differs from its canonical copy fails, even when scaled by the rank's coefficient; each replica against its own parameter", () => {
    const c = clipCoefficient(1, 2);
    expect(run([[tied("e", true)], [tied("e", false)]], [[{ v: 0.3 }], [{ v: c }]]).message).toBe(`rank 1, replica e.replica differs from e on rank 0 at element 0: ${c} (replica) vs 0.3 (canonical)`);
    expect(run([[tied("a", true), tied("b", true)], [tied("a", false), tied("b", false)]], [[{ v: 0.3 }, { v: 0.4 }], [{ v: 0.3 }, { v: 0.4 }]]).status).toBe("pass");
  });
});

describe("scaling.nonempty fails only a gradient that still holds its unclipped values", () => {
  it("a gradient scaled by a wrong coefficient is parity.tensors' to fail, not this check's", () => {
    const ctx = ctxOf({ backend: fakeBackend, clipCoef: 0.5, plan: [[tied("w", true)]], grads: [[{ v: 0.25 } as never]], outcomes: outcomes(2), genSpec: () => ({}) as never, inputSpec: () => ({}) as never });
    expect(judge(scalingNonempty, ctx).status).toBe("pass");
  });
});

describe("parity.tensors", () => {
  const param = (name: string, canonical = true) => ({ name, fqn: canonical ? name : `${name}.r`, canonical, block: { globalShape: [2], start: [0], len: [2] }, numel: 2 }) as unknown as CheckContext["plan"][number][number];
  const run = (over: Parameters<typeof ctxOf>[0]) => judge(parityTensors, ctxOf({ backend: fakeBackend, maxNorm: 1, outcomes: outcomes(2, 2), genSpec: () => ({}) as never, ...over }));
  const c = clipCoefficient(1, 2);

  it("names the element, the value got and the one expected, -0 with its sign; a pass counts the gradients", () => {
    const zeroBackend = { ...fakeBackend, verifyScaledMany: () => ({ item: 1, mismatch: { index: 1, actual: -0, expected: 0 } }) } as unknown as CheckContext["backend"];
    expect(run({ backend: zeroBackend, plan: [[param("a"), param("b", false)], []], grads: [[{ v: c }, { v: c }], []] as never }).message).toBe(
      `rank 0, b.r (replica of b), element 1: got -0, expected 0 = round(g * ${c})`,
    );
    expect(run({ plan: [[param("a")], [param("a")]], grads: [[{ v: c }], [{ v: c }]] as never })).toMatchObject({ id: "parity.tensors", status: "pass", message: "2 local gradients" });
  });

  it("bf16: each rank by its own coefficient, the float32 one or one held in bf16; a mismatch names the rank and the coefficients tried", () => {
    const bf16 = { tolerance: "bf16" as const, cell: { dtype: "bf16" as const } };
    // rank 0 right at float32, rank 1 by a coefficient in no list: the failure is rank 1's
    const r = run({ ...bf16, plan: [[param("a")], [param("b")]], grads: [[{ v: c }], [{ v: 0.1 }]] as never });
    expect(r.status).toBe("fail");
    expect(r.message).toMatch(new RegExp(`^rank 1, b, element 0: got 0\\.1, expected ${c} = round\\(g \\* ${c}\\), nor round\\(g \\* c\\) for c in [\\d.e-]+(, [\\d.e-]+)+ \\(the coefficient held in bf16\\)$`));
    // the second gradient of rank 1 off: named as rank 1's (its index counts after rank 0's gradients)
    const second = run({ ...bf16, plan: [[param("a")], [param("b"), param("c")]], grads: [[{ v: c }], [{ v: c }, { v: 0.1 }]] as never });
    expect(second.message).toMatch(/^rank 1, c, element 0: got 0\.1/);
    // both ranks right: pass (no retry makes a pass of a mismatch, nor a mismatch of a pass)
    expect(run({ ...bf16, plan: [[param("a")], [param("b")]], grads: [[{ v: c }], [{ v: c }]] as never }).status).toBe("pass");
  });
});

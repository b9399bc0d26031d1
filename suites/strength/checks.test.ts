/**
 * Issue 14: the checks that no shipped known-bad subject made fail, each made to fail on purpose by a
 * test-local subject with the bug (suites/strength/subjects), and each bug caught by a cell of the cpu
 * matrix: parity.norm's float32 contract in every tolerance class, memory.leak, errors.nonfinite, and
 * the clip corners (a general-p root, a missing + 1e-6) that the cpu matrix lacked before.
 */
import { describe, expect, it } from "vitest";
import { clipCoefficient, type Subject, type ToleranceClass } from "../../harness/subject/api.ts";
import { toBf16 } from "../../harness/numerics/numerics.ts";
import { clipCoefficientIn, toF16 } from "../../harness/checks/low-precision.ts";
import { loadSubject } from "../../harness/registry/registry.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { runMatrix } from "../../harness/run/runner.ts";
import type { CellResult } from "../../harness/results/types.ts";
import { cellId, type Case, type Cell } from "../../harness/cell/cell.ts";
import { builtinMatrices } from "../../matrix/index.ts";
import { coefInGradDtype } from "./subjects/coef-in-grad-dtype.ts";
import { testCell } from "../checks-branches/subjects.ts";

const SUBJECTS = "./suites/strength/subjects";
const load = (name: string) => loadSubject(`${SUBJECTS}/${name}.ts`);
const single = testCell;
const check = (r: CellResult, id: string) => r.checks.find((c) => c.id === id)!;
const failing = (r: CellResult) => r.checks.filter((c) => c.status === "fail").map((c) => c.id);

/**
 * The first cell of the cpu matrix (cases picked by `pick`, in matrix order) on which `subject` fails
 * one of `ids`, run as `clip-parity run` runs them (worker threads, the subject module loaded by path).
 */
/**
 * The first cell of the cpu matrix (those `pick` keeps) on which `subject` fails one of `ids`: its id
 * and its place in matrix order (cells run in parallel, so how many ran before the stop varies; the
 * first failing cell in matrix order does not).
 */
async function caughtOnCpu(subject: string, ids: readonly string[], pick: (c: Case) => boolean = () => true): Promise<{ at: string | null; index: number }> {
  const cpu = builtinMatrices().cpu;
  let at: string | null = null;
  const out = await runMatrix(
    { ...cpu, cases: cpu.cases.filter(pick) },
    {
      subjects: [subject],
      golden: "off",
      workers: 2,
      stopWhen: (r) => {
        if (r.checks.some((c) => c.status === "fail" && ids.includes(c.id))) at ??= r.id;
        return at !== null;
      },
    },
  );
  const first = out.results.find((r) => r.checks.some((c) => c.status === "fail" && ids.includes(c.id)));
  const order = cpu.cases.filter(pick).map((c) => cellId({ subject, ...c }));
  return { at: first?.id ?? at, index: first ? order.indexOf(first.id) : -1 };
}

describe("parity.norm: the returned norm is a float32 value in every class", () => {
  for (const tolerance of ["exact", "fp32", "bf16"] as ToleranceClass[]) {
    it(`a float64 norm within the tolerance fails under ${tolerance}`, async () => {
      const bad = { ...(await load("float64-norm")), tolerance } satisfies Subject;
      // p = 1.5: the float64 root is not a float32 value, yet within 4 ulp of the reference
      const r = await runCell(single({ normType: 1.5 }), { subject: bad });
      expect(Math.abs(r.totalNorm! - r.referenceNorm) / r.referenceNorm).toBeLessThan(2 ** -22);
      expect(check(r, "parity.norm").status).toBe("fail");
      expect(check(r, "parity.norm").message).toMatch(/returned .* which is not a float32 value \(the nearest float32 is .*\)/);
    });
  }

  it("the cpu matrix catches it on its first cells", async () => {
    const { at, index } = await caughtOnCpu(`${SUBJECTS}/float64-norm.ts`, ["parity.norm"]);
    expect(at).not.toBeNull();
    expect(index).toBeLessThan(4);
  });
});

describe("parity.tensors in the bf16 class: the coefficient in the gradients' dtype, one per rank", () => {
  // PyTorch's clip_grads_with_norm_ divides in the dtype of the norm get_total_norm returns: bfloat16 for
  // bfloat16 gradients. The class that claims PyTorch's reduction accepts that coefficient; the others do not,
  // and no class accepts a coefficient off by more than that rounding, or two coefficients on one rank.
  const bf16 = (over: Partial<Cell> = {}) => single({ dtype: "bf16", ...over });
  for (const dtype of ["bf16", "f16"] as const) {
    it(`accepts it under bf16 for ${dtype} gradients, and fails it under fp32`, async () => {
      const r = await runCell(bf16({ dtype }), { subject: coefInGradDtype() });
      expect(check(r, "parity.tensors").status, check(r, "parity.tensors").message).toBe("pass");
      const strict = await runCell(bf16({ dtype }), { subject: { ...coefInGradDtype(), tolerance: "fp32" } });
      expect(check(strict, "parity.tensors").status).toBe("fail");
      expect(check(strict, "parity.tensors").message).not.toMatch(/nor round/);
    });
  }

  for (const dtype of ["bf16", "f16"] as const) {
    it(`accepts FSDP1's float32 coefficient rounded to ${dtype} (its norm returned rounded too) under bf16, and fails it under fp32`, async () => {
      // a cell where that coefficient is neither of the others (asserted), so only this rule passes it
      const maxNorm = dtype === "bf16" ? 0.3 : 1;
      const cell = bf16({ dtype, seed: dtype === "bf16" ? 1 : 0, maxNorm });
      const r = await runCell(cell, { subject: coefInGradDtype({ rounded: true }) });
      const round = dtype === "bf16" ? toBf16 : toF16;
      expect([clipCoefficient(maxNorm, r.totalNorm!), clipCoefficientIn(dtype, maxNorm, r.totalNorm!)]).not.toContain(round(clipCoefficient(maxNorm, r.referenceNorm)));
      expect(check(r, "parity.tensors").status, check(r, "parity.tensors").message).toBe("pass");
      expect(check(r, "parity.norm").status, check(r, "parity.norm").message).toBe("pass");
      const strict = await runCell(cell, { subject: { ...coefInGradDtype({ rounded: true }), tolerance: "fp32" } });
      expect(check(strict, "parity.tensors").status).toBe("fail");
    });
  }

  for (const rounded of [false, true]) {
    it(`fails a coefficient off by more than its rounding, naming the coefficients${rounded ? " (FSDP1's way)" : ""}`, async () => {
      const r = await runCell(bf16(), { subject: coefInGradDtype({ skew: 1 + 2 ** -6, rounded }) });
      expect(check(r, "parity.tensors").status).toBe("fail");
      expect(check(r, "parity.tensors").message).toMatch(/expected .* = round\(g \* [\d.e-]+\), nor round\(g \* c\) for c in [\d.e-]+(, [\d.e-]+)+ \(the coefficient held in bf16\)/);
    });
  }

  it("fails a rank that scales its gradients by both coefficients", async () => {
    const r = await runCell(bf16(), { subject: coefInGradDtype({ mixed: true }) });
    expect(check(r, "parity.tensors").status).toBe("fail");
  });
});

describe("memory.leak fails on a subject that leaves a tensor allocated", () => {
  it("fails with the rank and the bytes, and only memory.leak fails", async () => {
    const r = await runCell(single(), { subject: await load("leaky") });
    expect(failing(r)).toEqual(["memory.leak"]);
    expect(check(r, "memory.leak").message).toMatch(/^rank 0: [\d,]+ bytes still allocated after the clip/);
  });

  it("the cpu matrix catches it", async () => {
    expect((await caughtOnCpu(`${SUBJECTS}/leaky.ts`, ["memory.leak"])).at).not.toBeNull();
  });
});

describe("errors.nonfinite fails when the error asked for is not raised", () => {
  const nan = single({ regime: "nonfinite-nan" });
  it("a NaN norm returned instead of raised", async () => {
    const r = await runCell(nan, { subject: await load("nonfinite-ignored") });
    expect(failing(r)).toContain("errors.nonfinite");
    expect(check(r, "errors.nonfinite").message).toMatch(/the norm is NaN but rank\(s\) 0,1 returned NaN instead of raising/);
  });

  it("an unrelated error raised instead of the non-finite one", async () => {
    const r = await runCell(single({ regime: "nonfinite-inf" }), { subject: await load("nonfinite-wrong-error") });
    expect(failing(r)).toEqual(["errors.nonfinite"]);
    expect(check(r, "errors.nonfinite").message).toMatch(/rank 0 raised, but not for the non-finite norm: cannot read properties/);
  });

  it("the cpu matrix catches both", async () => {
    const nonfinite = (c: Case) => c.regime.startsWith("nonfinite");
    expect((await caughtOnCpu(`${SUBJECTS}/nonfinite-ignored.ts`, ["errors.nonfinite"], nonfinite)).at).not.toBeNull();
    expect((await caughtOnCpu(`${SUBJECTS}/nonfinite-wrong-error.ts`, ["errors.nonfinite"], nonfinite)).at).not.toBeNull();
  });
});

describe("the clip corners catch what the sweep alone did not", () => {
  it("a general-p root taken as a square root: caught only on p = 1.5 or 3", async () => {
    const subject = `${SUBJECTS}/general-p-as-2.ts`;
    const special = (c: Case) => c.normType === 2 || c.normType === 1 || c.normType === Infinity;
    // the matrix's first 24 cases with p in {2, 1, inf} (every regime, both models): the root is right there
    const sample = builtinMatrices().cpu.cases.filter(special).slice(0, 24);
    expect((await caughtOnCpu(subject, ["parity.norm"], (c) => sample.includes(c))).at).toBeNull();
    const { at } = await caughtOnCpu(subject, ["parity.norm"], (c) => !special(c));
    expect(at).toMatch(/\/n(1\.5|3)\//);
  });

  it("a clip coefficient without + 1e-6: caught only with a small norm and clip_coef < 1", async () => {
    const subject = `${SUBJECTS}/no-eps.ts`;
    const smallAndClipped = (c: Case) => c.regime === "inactive" && c.maxNorm !== undefined;
    const large = builtinMatrices().cpu.cases.filter((c) => c.regime === "active" && c.dtype === "f32" && c.normType === 2).slice(0, 4);
    expect(large.length).toBe(4);
    expect((await caughtOnCpu(subject, ["parity.tensors"], (c) => large.includes(c))).at).toBeNull();
    const { at } = await caughtOnCpu(subject, ["parity.tensors"], smallAndClipped);
    expect(at).toMatch(/\/inactive\/s0\/max/);
  });

  it("the cpu matrix has an inactive cell (clip_coef = 1) with p = 2 for each correct subject", () => {
    const ids = builtinMatrices().cpu.cases.filter((c) => c.regime === "inactive" && c.normType === 2 && c.maxNorm === undefined).map((c) => cellId({ subject: "", ...c }));
    expect(ids.length).toBeGreaterThan(0);
  });
});

/**
 * The `tiny` regime (issue 53; SPEC §5): the norm far below the 1e-6 the clip coefficient adds to it.
 * `eps-per-rank` (torch's DTensor clip_grad_norm_, which added the 1e-6 to every rank's partial norm
 * before the reduction) is caught by `parity.tensors` on every tiny cell of the cpu matrix whose norm sums
 * partial norms of several ranks (the coverage planner's `sumsPartialNorms`), and on no other check; on
 * the tiny cells where any clip adds the 1e-6 once (one rank, the inf-norm's MAX, Replicate-only copies)
 * it passes, as the correct subjects pass every tiny cell (suites/matrix.test.ts). A float16 cell is
 * refused before anything runs.
 */
import { describe, expect, it } from "vitest";
import { InputError } from "../../harness/errors.ts";
import { regimeSpec } from "../../harness/gradients/regimes.ts";
import { selectCells } from "../../harness/run/policy.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { cellId } from "../../harness/cell/cell.ts";
import { caseFacts } from "../../matrix/coverage.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { resolveMatrix } from "../../matrix/index.ts";

describe("tiny regime", () => {
  it("is refused in float16, naming the regime, the dtype and why", () => {
    expect(() => regimeSpec("tiny", "f16")).toThrow(InputError);
    expect(() => regimeSpec("tiny", "f16")).toThrow(/regime "tiny" cannot run in f16: .*2\^-24.*f32 and bf16 only/);
    for (const dtype of ["f32", "bf16"]) expect(regimeSpec("tiny", dtype).exp).toBe(-40);
    const matrix = { name: "m", description: "", backend: "cpu" as const, cases: [{ layout: parseLayout("tp2"), model: "llama3-debug", dtype: "f16" as const, normType: 2, regime: "tiny" as const, seed: 0 }] };
    expect(() => selectCells(matrix, { subjects: ["reference"] })).toThrow(/regime "tiny" cannot run in f16/);
  });

  const cpu = resolveMatrix("cpu");
  const tiny = cpu.cases.filter((c) => c.regime === "tiny");

  it("the cpu matrix has tiny cells where partial norms of several ranks are summed, in f32 and bf16, and some where they are not", () => {
    const facts = tiny.map(caseFacts);
    for (const dtype of ["f32", "bf16"]) expect(facts.filter((f) => f.dtype === dtype && f.sumsPartialNorms && f.clipCoef < 1).length).toBeGreaterThanOrEqual(6);
    expect(facts.filter((f) => !f.sumsPartialNorms).length).toBeGreaterThanOrEqual(3);
  });

  it("eps-per-rank fails parity.tensors (and nothing else) exactly where partial norms of several ranks are summed", { timeout: 600_000 }, async () => {
    const subject = BUILTIN_SUBJECTS["eps-per-rank"]!;
    const verdicts: string[] = [];
    const expected: string[] = [];
    for (const c of tiny) {
      const cell = { subject: subject.name, ...c };
      const r = await runCell(cell, { subject });
      verdicts.push(`${cellId(cell)}: ${r.checks.filter((x) => x.status === "fail").map((x) => x.id).join(",") || "pass"}`);
      expected.push(`${cellId(cell)}: ${caseFacts(c).sumsPartialNorms ? "parity.tensors" : "pass"}`);
    }
    expect(verdicts).toEqual(expected);
  });
});

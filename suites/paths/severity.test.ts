/**
 * Issue 57: a frameworks cell whose failed checks mix severities and from which no root cause was read
 * (harness/external/causes.ts cellSeverity and causeVerdict). The rule: with no cause read, the failed checks
 * decide by what each means, and the cell takes the highest of them (a wrong result > a raise or hang > excess
 * memory > a performance note), never the first one listed nor only those a table names. suites/torch's test
 * of the scale tries one failed check at a time, or a mix with causes read; here the mixes without.
 *
 * Kept weakening (suites/weakenings): causes-first-failed-check.patch (the first failed check decides) fails
 * "no cause read: the highest of the failed checks' severities, whatever their order".
 */
import { describe, expect, it } from "vitest";
import { causesOf, causeVerdict, cellSeverity, SEVERITY_SCALE } from "../../harness/external/causes.ts";
import type { CellResult } from "../../harness/results/types.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { CHECK_IDS } from "../../harness/checks/index.ts";
import { severityOf } from "../../harness/results/severity.ts";

describe("a framework cell that failed checks of mixed severities, no cause read", () => {
  it("no cause read: the highest of the failed checks' severities, whatever their order", () => {
    const cases: [string[], string][] = [
      [["comm.budget", "memory.leak"], "excess memory"],
      [["memory.peak", "comm.budget"], "excess memory"],
      [["comm.budget", "liveness"], "raise or hang"],
      [["errors.raised", "memory.peak", "comm.budget"], "raise or hang"],
      [["comm.budget", "memory.peak", "errors.raised"], "raise or hang"],
      [["errors.raised", "comm.reach"], "wrong result"], // comm.reach: a check no table grades is a wrong result
      [["comm.budget", "memory.leak", "liveness", "parity.tensors"], "wrong result"],
      [["memory.leak", "comm.budget"], "excess memory"],
    ];
    for (const [failed, want] of cases) {
      expect(cellSeverity({ failed, causes: [] }), failed.join(", ")).toBe(want);
      expect(cellSeverity({ failed: [...failed].reverse(), causes: [] }), [...failed].reverse().join(", ")).toBe(want);
    }
  });

  it("every mix of two checks: the more severe one's, the same either way round", () => {
    const alone = new Map(CHECK_IDS.map((id) => [id, cellSeverity({ failed: [id], causes: [] })!]));
    // a correctness check alone is a wrong result; comm.budget, the one performance check, a note
    for (const id of CHECK_IDS) if (severityOf({ id }) === "performance") expect(alone.get(id)).toBe("performance note");
    for (const a of CHECK_IDS) {
      for (const b of CHECK_IDS) {
        const want = SEVERITY_SCALE[Math.min(SEVERITY_SCALE.indexOf(alone.get(a)!), SEVERITY_SCALE.indexOf(alone.get(b)!))];
        expect(cellSeverity({ failed: [a, b], causes: [] }), `${a} + ${b}`).toBe(want);
      }
    }
  });

  it("the cell's verdict: no cause, the severity of its worst failed check", () => {
    // every rank returned the same norm, none raised, no hang: errors.raised and comm.reach failed, no cause is read
    const r = {
      cell: { subject: "torch:x", layout: parseLayout("dp_shard2"), model: "llama3-debug", dtype: "f32", normType: 2, regime: "active", seed: 0 },
      checks: [
        { id: "parity.norm", status: "pass", message: "" },
        { id: "errors.raised", status: "fail", message: "rank 1 raised where nothing asked it to" },
        { id: "comm.budget", status: "pass", message: "" },
        { id: "comm.reach", status: "fail", message: "rank 0 returned a norm (1), but ..." },
      ],
      ranks: [
        { rank: 0, norm: 1 },
        { rank: 1, norm: 1 },
      ],
      liveness: null,
      referenceNorm: 1,
    } as unknown as CellResult;
    expect(causesOf(r)).toEqual([]);
    expect(causeVerdict(r)).toEqual({ severity: "wrong result", causes: [] });
    // the same without comm.reach: a raise
    const raisedOnly = { ...r, checks: r.checks.filter((c) => c.id !== "comm.reach") } as CellResult;
    expect(causeVerdict(raisedOnly)).toEqual({ severity: "raise or hang", causes: [] });
  });
});

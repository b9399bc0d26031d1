/**
 * reports/groups.ts: failures grouped by (subject, check), what every reporter lists before any single
 * cell. Checked on synthetic cells whose answer is known: how pairs are counted, which messages count as
 * distinct, how a known-bad subject's failures are split (declared, also) from unexpected ones, and a
 * known-bad subject that nothing caught reported as missed.
 */
import { describe, expect, it } from "vitest";
import type { CellJson } from "../../harness/results/schema.ts";
import { failureDigest, groupKindText, messageShape, missedText } from "../../reports/groups.ts";
import { synthCell } from "./fixtures.ts";

function failing(id: string, fails: Record<string, string>): CellJson {
  const checks = ["parity.norm", "memory.peak", "comm.budget", "scaling.nonempty"].map((check) =>
    check in fails ? { id: check, status: "fail" as const, message: `${fails[check]}\nreproduce: npx clip-parity cell ${id}` } : { id: check, status: "pass" as const, message: "" },
  );
  return synthCell(id, { checks });
}

describe("messageShape", () => {
  it("blanks numbers (integers, reals, exponents, signs, nan, inf) and drops the reproduce line", () => {
    expect(messageShape("rank 3: total norm 1013.12 != reference -1.5e-3 (4 ulps)\nreproduce: npx clip-parity cell x")).toBe("rank #: total norm # != reference # (# ulps)");
    expect(messageShape("the norm is NaN but rank 1 returned inf")).toBe(messageShape("the norm is nan but rank 7 returned 2.5"));
    expect(messageShape("scratch peak 12,718,080 bytes")).toBe("scratch peak # bytes");
    expect(messageShape("rank(s) 1,2,3 returned 4")).toBe(messageShape("rank(s) 1 returned 4"));
  });

  it("keeps words: messages that differ beyond numbers have different shapes", () => {
    expect(messageShape("rank 0, tok_embeddings.weight: not scaled")).not.toBe(messageShape("rank 0, output.weight: not scaled"));
  });
});

describe("failureDigest", () => {
  const cells = [
    failing("a/single", { "parity.norm": "rank 0: total norm 2 != reference 3", "memory.peak": "rank 0: scratch 10 > budget 5" }),
    failing("a/dp_shard2", { "parity.norm": "rank 1: total norm 7 != reference 9" }),
    failing("a/tp2", { "parity.norm": "rank 0: the norm was never reduced over pp" }),
    synthCell("a/pp2"),
    failing("bad/single", { "comm.budget": "rank 0 issued 9 collectives", "parity.norm": "rank 0: total norm 1 != reference 2" }),
    failing("bad/dp_shard2", { "comm.budget": "rank 0 issued 12 collectives" }),
    synthCell("quiet-bad/single"),
    synthCell("quiet-bad/dp_shard2"),
    synthCell("good/single"),
  ];
  const catchBy = { bad: ["comm.budget"], "quiet-bad": ["memory.peak"] };
  const d = failureDigest(cells, catchBy);

  it("counts every failing (cell, check) pair once, in one group per (subject, check)", () => {
    expect(d.pairs).toBe(7);
    expect(d.failingCells).toBe(5);
    const all = [...d.unexpected, ...d.expected];
    expect(all.reduce((n, g) => n + g.cells.length, 0)).toBe(d.pairs);
    expect(all.map((g) => `${g.subject} ${g.check}`).sort()).toEqual(["a memory.peak", "a parity.norm", "bad comm.budget", "bad parity.norm"]);
  });

  it("a group holds its cells in run order, the first cell's message, and one message per distinct shape", () => {
    const g = d.unexpected.find((x) => x.subject === "a" && x.check === "parity.norm")!;
    expect(g.cells.map((c) => c.id)).toEqual(["a/single", "a/dp_shard2", "a/tp2"]);
    expect(g.firstMessage).toBe("rank 0: total norm 2 != reference 3");
    expect(g.messages).toEqual(["rank 0: total norm 2 != reference 3", "rank 0: the norm was never reduced over pp"]);
  });

  it("separates a subject meant to pass (unexpected) from a known-bad one (declared first, then also)", () => {
    expect(d.unexpected.map((g) => g.kind)).toEqual(["unexpected", "unexpected"]);
    expect(d.expected.map((g) => [g.subject, g.check, g.kind])).toEqual([
      ["bad", "comm.budget", "declared"],
      ["bad", "parity.norm", "also"],
    ]);
    expect(groupKindText(d.expected[0]!)).toBe("expected: a check its catchBy names");
    expect(groupKindText(d.expected[1]!)).toBe("also failed (catchBy: comm.budget)");
    expect(groupKindText(d.unexpected[0]!)).toBe("unexpected");
  });

  it("reports a known-bad subject that none of its declared checks caught as missed, with its cell count", () => {
    expect(d.missed).toEqual([{ subject: "quiet-bad", catchBy: ["memory.peak"], cells: 2 }]);
    expect(missedText(d.missed[0]!)).toBe("quiet-bad is known-bad (catchBy memory.peak) but none of those checks failed in its 2 cells");
  });

  it("a known-bad subject caught only by a check it does not declare is still missed", () => {
    const only = failureDigest([failing("bad/single", { "parity.norm": "x 1" })], { bad: ["comm.budget"] });
    expect(only.expected.map((g) => g.kind)).toEqual(["also"]);
    expect(only.missed.map((m) => m.subject)).toEqual(["bad"]);
  });

  it("without catchBy every failure is unexpected and nothing is missed", () => {
    const plain = failureDigest(cells);
    expect(plain.expected).toEqual([]);
    expect(plain.missed).toEqual([]);
    expect(plain.unexpected.reduce((n, g) => n + g.cells.length, 0)).toBe(7);
  });
});

/**
 * Issue 45: a known-bad subject failing as it must is shown green in CI's JUnit view (a passed testcase
 * with an expected-failure property), and the one way it can fail the job, none of its declared checks
 * catching it, is a failing testcase of its own.
 */
import { describe, expect, it } from "vitest";
import { renderJunit } from "../../reports/junit.ts";
import { summarizeJson } from "../../harness/results/schema.ts";
import { all, parseXml, synthCell } from "./fixtures.ts";

const failing = (id: string, check: string) =>
  synthCell(id, { checks: [{ id: check, status: "fail", message: `${check} broke\nreproduce: npx clip-parity cell ...` }, { id: "parity.tensors", status: "pass", message: "" }] });

describe("JUnit: expected failures", () => {
  it("a known-bad subject's failing cells pass with an expected-failure property; a correct subject's fail", () => {
    const cells = [failing("no-pp-reduce/pp2/llama3-debug/f32/n2/active/s0", "parity.norm"), failing("bucketed/pp2/llama3-debug/f32/n2/active/s0", "parity.norm")];
    const root = parseXml(renderJunit(cells, summarizeJson(cells), { catchBy: { "no-pp-reduce": ["parity.norm"] } }));
    const bad = all(root, "testsuite").find((s) => s.attrs.name === "no-pp-reduce")!;
    expect(bad.attrs).toMatchObject({ tests: "2", failures: "0" });
    const [cell, caught] = all(bad, "testcase");
    expect(all(cell!, "failure")).toEqual([]);
    expect(all(all(cell!, "properties")[0]!, "property")[0]!.attrs).toEqual({ name: "expected-failure", value: "parity.norm: parity.norm broke" });
    expect(caught!.attrs.name).toBe("caught by parity.norm");
    expect(all(caught!, "failure")).toEqual([]);
    const good = all(root, "testsuite").find((s) => s.attrs.name === "bucketed")!;
    expect(good.attrs).toMatchObject({ tests: "1", failures: "1" });
    expect(root.attrs.failures).toBe("1");
  });

  it("a known-bad subject none of its checks caught is a failing testcase", () => {
    const cells = [failing("no-pp-reduce/pp2/llama3-debug/f32/n2/active/s0", "memory.peak")];
    const root = parseXml(renderJunit(cells, summarizeJson(cells), { catchBy: { "no-pp-reduce": ["parity.norm"] } }));
    const suite = all(root, "testsuite")[0]!;
    expect(suite.attrs).toMatchObject({ tests: "2", failures: "1" });
    const missed = all(suite, "testcase").find((c) => c.attrs.name === "caught by parity.norm")!;
    expect(all(missed, "failure")[0]!.attrs.message).toMatch(/no-pp-reduce is known-bad \(catchBy parity\.norm\) but none of those checks failed/);
    expect(all(all(all(suite, "testcase")[0]!, "properties")[0]!, "property")[0]!.attrs.value).toBe("memory.peak (not in its catchBy): memory.peak broke");
  });
});

/**
 * cli/section.ts: a resume or train section meets its expectations only when every correct case
 * passes and every known-bad case fails its check; anything else (a skipped check, an isolation fault)
 * is exit 1 with the case named. The rule is harness/sandbox/isolated.ts's expectationMet, which the
 * matrix suites use too.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { runExpectedSection } from "../../cli/section.ts";
import { InputError } from "../../harness/errors.ts";
import { expectationMet } from "../../harness/sandbox/isolated.ts";

type Case = { id: string; expect: "pass" | "fail"; gives: "pass" | "fail" | "skip" };
const result = (c: Case) => ({ id: c.id, durationMs: 1500, check: { id: "x.check", status: c.gives, message: `${c.id} said ${c.gives}` } });

function section(cases: Case[]) {
  return {
    kind: "train" as const,
    matrix: "cpu",
    cases,
    sections: ["cpu"],
    runAll: async (cs: readonly Case[]) => cs.map((c) => (c.id === "escaped" ? { fault: "the subject called process.exit(0)" } : { result: result(c), fault: null })),
    idOf: (c: Case) => c.id,
    checkOf: (r: ReturnType<typeof result>) => r.check,
  };
}

describe("runExpectedSection", () => {
  afterEach(() => vi.restoreAllMocks());
  const output = () => {
    const lines: string[] = [];
    vi.spyOn(process.stdout, "write").mockImplementation((s) => (lines.push(String(s)), true));
    return lines;
  };

  it("exit 0 when correct cases pass and known-bad cases fail; the JSON counts them", async () => {
    const lines = output();
    const json = join(mkdtempSync(join(tmpdir(), "cp-section-")), "r.json");
    const code = await runExpectedSection(section([{ id: "a", expect: "pass", gives: "pass" }, { id: "c", expect: "fail", gives: "fail" }]), json);
    expect(code).toBe(0);
    expect(lines.join("")).toContain("2 train cells: 2 as expected, 0 not");
    expect(JSON.parse(readFileSync(json, "utf8")).summary).toEqual({ cells: 2, passed: 1, failed: 1, skipped: 0, unexpected: 0 });
  });

  it("a correct case whose check was skipped is not a pass: exit 1, as the suites judge it", async () => {
    const lines = output();
    expect(await runExpectedSection(section([{ id: "b", expect: "pass", gives: "skip" }]), undefined)).toBe(1);
    expect(lines.join("")).toContain("1 train cells: 0 as expected, 1 not");
    expect(expectationMet("pass", { id: "x", status: "skip", message: "" })).toBe(false);
    expect(expectationMet("fail", { id: "x", status: "skip", message: "" })).toBe(false);
  });

  it("a case whose subject broke out of its worker fails `isolation`, whatever it expected", async () => {
    for (const expectation of ["pass", "fail"] as const) {
      const lines = output();
      expect(await runExpectedSection(section([{ id: "escaped", expect: expectation, gives: "pass" }]), undefined)).toBe(1);
      expect(lines.join("")).toMatch(/FAIL fail +\(expected \w+\) escaped\n +isolation: the subject called process\.exit\(0\)/);
      vi.restoreAllMocks();
    }
  });

  it("exit 1 naming the case when a correct case fails or a known-bad case passes", async () => {
    for (const bad of [{ id: "broken", expect: "pass", gives: "fail" }, { id: "uncaught", expect: "fail", gives: "pass" }] as Case[]) {
      const lines = output();
      expect(await runExpectedSection(section([{ id: "a", expect: "pass", gives: "pass" }, bad]), undefined)).toBe(1);
      expect(lines.join("")).toMatch(new RegExp(`FAIL ${bad.gives} +\\(expected ${bad.expect}\\) ${bad.id}[\\s\\S]*${bad.id} said ${bad.gives}`));
      expect(lines.join("")).toContain("2 train cells: 1 as expected, 1 not");
      vi.restoreAllMocks();
    }
  });

  it("a matrix without the section is bad input naming the ones that have it", async () => {
    await expect(runExpectedSection({ ...section([]), matrix: "gpu4" }, undefined)).rejects.toThrow(InputError);
    await expect(runExpectedSection({ ...section([]), matrix: "gpu4" }, undefined)).rejects.toThrow('--matrix: "gpu4" has no train section (matrices with one: cpu)');
  });
});

import { describe, expect, it } from "vitest";
import { CHECK_INFO } from "../../harness/checks/index.ts";
import { PERFORMANCE_CHECKS, severityOf } from "../../harness/results/severity.ts";

describe("severity: the reporters' table of performance checks", () => {
  it("is the checks' own declarations: every check declared performance, and no other", () => {
    const declared = [...CHECK_INFO].filter(([, c]) => c.severity === "performance").map(([id]) => id);
    expect(declared.length).toBeGreaterThan(0);
    expect([...PERFORMANCE_CHECKS].sort()).toEqual(declared.sort());
  });

  it("classifies a result by what it carries, else by its id; an unknown id is correctness", () => {
    for (const [id, c] of CHECK_INFO) expect(severityOf({ id }), id).toBe(c.severity);
    expect(severityOf({ id: "comm.budget", severity: "correctness" })).toBe("correctness");
    expect(severityOf({ id: "no.such.check" })).toBe("correctness");
  });
});

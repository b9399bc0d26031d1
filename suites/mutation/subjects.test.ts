/**
 * What `clip-parity list subjects` shows of each correct subject: its name, a one-line description of
 * what it models and the tolerance class it claims. (The cells check the clip; this checks the label.)
 */
import { describe, expect, it } from "vitest";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, OPTIMIZER_SUBJECTS } from "../../harness/registry/registry.ts";

describe("correct subjects: name, description, tolerance class", () => {
  const claims: Record<string, string> = { reference: "exact", bucketed: "fp32", titan: "fp32", exact: "exact", "titan-mtp": "exact" };
  for (const name of [...CORRECT_SUBJECTS, ...OPTIMIZER_SUBJECTS]) {
    it(name, () => {
      const s = BUILTIN_SUBJECTS[name]!;
      expect(s.name).toBe(name);
      expect(s.description).toMatch(/^\S.{20,}$/);
      expect(s.tolerance).toBe(claims[name]);
    });
  }
});

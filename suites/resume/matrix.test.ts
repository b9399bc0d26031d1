/**
 * The resume section of the matrix (matrix/resume.ts; `npm test -- --matrix NAME`, default cpu):
 * correct loaders pass resume.equal (same layout for every correct subject, any layout for exact),
 * and each known-bad loader fails it.
 */
import { describe, expect, it } from "vitest";
import { resumeCases } from "../../matrix/resume.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { resumeCellId, runResume } from "../../harness/training/resume.ts";

const matrix = process.env.CLIP_PARITY_MATRIX ?? "cpu";
const cases = resumeCases(matrix);

describe(`matrix ${matrix}: resume section`, () => {
  if (cases.length === 0) it.skip(`matrix ${matrix} has no resume section`, () => {});
  for (const c of cases) {
    it(`${c.expect === "pass" ? "passes" : "fails"}: ${resumeCellId(c)} (${c.note})`, async () => {
      const r = await runResume(c, { subject: BUILTIN_SUBJECTS[c.subject]! });
      const check = r.checks.find((k) => k.id === "resume.equal")!;
      if (c.expect === "pass") {
        expect(check.status, check.message).toBe("pass");
        expect(r.compared.elements).toBeGreaterThan(0);
      } else {
        expect(check.status, check.message).toBe("fail");
        if (c.loader === "drop-step") expect(check.message).toMatch(/optimizer step count (\d+) after resuming; uninterrupted run: (?!\1)\d+/);
        if (c.loader === "drop-tied") expect(check.message).toMatch(/rank \d+ mtp\.\S*embed_tokens\.weight (param|exp_avg)/);
        expect(check.message).toContain(`reproduce: npx clip-parity resume --subject ${c.subject}`);
      }
    });
  }
});

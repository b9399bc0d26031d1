/**
 * Issue 22: what the fuzzer sees beyond the clip bugs of its self-test.
 * - Memory: its cases hold a few hundred bytes, so the 1 MiB slack of a model cell hid a copy of every
 *   gradient; the budget of a fuzz case is sized to it (FUZZ_SCRATCH_SLACK_BYTES).
 * - Optimizer-owned subjects: their cases tie parameters as trainers do (a replica on the last stage,
 *   placed like its canonical copy: a tie group is the copies of one block) and draw the `finalize`
 *   regime, so the correct `titan-mtp` holds every property (suites/fuzz/subjects.test.ts) and a
 *   coefficient taken before the finalize, a tied copy broadcast instead of summed, or a finalize flag
 *   never reset, are found.
 * Each subject here passed the fuzzer on 085b832 (copy-every-grad) or could not be fuzzed there.
 */
import { afterAll, describe, expect, it } from "vitest";
import fc from "fast-check";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadSubject } from "../../harness/registry/registry.ts";
import { caseArb } from "../../harness/fuzz/arbitraries.ts";
import { envSeed, fuzzSubject } from "../../harness/fuzz/fuzz.ts";

const seed = envSeed();
const outDir = mkdtempSync(join(tmpdir(), "clip-parity-fuzz-strength-"));
afterAll(() => rmSync(outDir, { recursive: true, force: true }));

const S = (name: string) => `./suites/strength/subjects/${name}.ts`;
const CAUGHT: [string, string[]][] = [
  ["copy-every-grad", ["memory.peak"]],
  ["coef-before-finalize", ["parity.norm", "parity.tensors"]],
  ["broadcast-tied", ["parity.norm", "parity.tensors"]],
  ["finalize-once", ["parity.tensors", "scaling.replicas"]],
];

describe("the fuzzer finds memory and optimizer-owned bugs", () => {
  for (const [name, checks] of CAUGHT) {
    it(`${name}: caught by ${checks.join(" or ")} within 300 cases`, { timeout: 120_000 }, async () => {
      const subject = await loadSubject(S(name));
      const run = await fuzzSubject(subject, { seed, numRuns: 300, targets: checks, outDir, subjectSpec: S(name) });
      expect(run.details.failed, `no case of 300 (seed ${seed}) failed ${checks.join(" or ")}`).toBe(true);
      expect(run.counterexample!.violations.map((v) => v.id).some((id) => checks.includes(id))).toBe(true);
    });
  }

  it("an optimizer-owned subject's cases tie as trainers do and draw finalize; a clip subject's need not", () => {
    const sample = (shape: "clip" | "optimizer") => fc.sample(caseArb({ subject: "s", shape }), { seed, numRuns: 300 });
    const asTrainers = (shape: "clip" | "optimizer") =>
      sample(shape).flatMap((c) =>
        c.params.flatMap((p) => p.replicas.map((r) => r.stage === c.layout.pp - 1 && p.stage < r.stage && JSON.stringify([r.mesh, r.axes, r.placements]) === JSON.stringify([p.mesh, p.axes, p.placements]))),
      );
    const optimizer = asTrainers("optimizer");
    expect(optimizer.length).toBeGreaterThan(50);
    expect(optimizer.every(Boolean)).toBe(true);
    expect(asTrainers("clip").some((m) => !m)).toBe(true);
    expect(sample("optimizer").filter((c) => c.regime === "finalize").length).toBeGreaterThan(10);
    expect(sample("clip").some((c) => c.regime === "finalize")).toBe(false);
  });
});

/**
 * Issue 22: a clip that takes a DTensor Partial(sum) gradient for a Shard (the norm of each rank's
 * partial, all_reduced, instead of the norm of their sum) passed every cell before the cpu matrix had
 * Partial gradients, and the fuzzer never generated one. The test-local subject with that bug
 * (suites/strength/subjects/partial-as-shard.ts) now fails its catchBy on the cpu matrix's Partial
 * cells and in a fuzz search, while every correct subject passes those cells.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CORRECT_SUBJECTS, loadSubject, OPTIMIZER_SUBJECTS } from "../../harness/registry/registry.ts";
import { envSeed, fuzzSubject, SELF_TEST_RUNS } from "../../harness/fuzz/fuzz.ts";
import { readCaseFile } from "../../harness/fuzz/replay.ts";
import { runFuzzCase } from "../../harness/fuzz/run.ts";
import { runMatrix } from "../../harness/run/runner.ts";
import { builtinMatrices } from "../../matrix/index.ts";

const BAD = "./suites/strength/subjects/partial-as-shard.ts";
const PARTIAL_MODELS = ["llama3-debug-sp", "llama3-debug-unreduced"];
const cpu = builtinMatrices().cpu;
const partialCases = cpu.cases.filter((c) => PARTIAL_MODELS.includes(c.model));
const outDir = mkdtempSync(join(tmpdir(), "clip-parity-partial-"));
afterAll(() => rmSync(outDir, { recursive: true, force: true }));

const failing = (checks: { id: string; status: string }[]) => checks.filter((c) => c.status === "fail").map((c) => c.id);

describe("Partial(sum) gradients in the cpu matrix", () => {
  it("the cpu matrix ends with fewer than 20 small Partial cases (then only the tiny ones), on both variants, with Partial axes of 1, 2 and 4 ranks", () => {
    expect(partialCases.length).toBeGreaterThan(0);
    expect(partialCases.length).toBeLessThan(20);
    // appended: earlier cells keep their place; the tiny regime's cases were appended after them (issue 53)
    const tiny = cpu.cases.filter((c) => c.regime === "tiny").length;
    expect(cpu.cases.slice(-partialCases.length - tiny, cpu.cases.length - tiny)).toEqual(partialCases);
    expect(cpu.cases.slice(cpu.cases.length - tiny).every((c) => c.regime === "tiny")).toBe(true);
    expect(new Set(partialCases.map((c) => c.model))).toEqual(new Set(PARTIAL_MODELS));
    const sizes = new Set(partialCases.map((c) => (c.model === "llama3-debug-sp" ? c.layout.tp : c.layout.dp_replicate)));
    expect(sizes).toEqual(new Set([1, 2, 4]));
  });

  it("every correct subject passes every Partial cell; partial-as-shard fails parity.norm on the unreduced ones", { timeout: 600_000 }, async () => {
    const bad = await loadSubject(BAD);
    expect(bad.catchBy).toEqual(["parity.norm"]);
    const out = await runMatrix({ ...cpu, cases: partialCases }, { subjects: [...CORRECT_SUBJECTS, ...OPTIMIZER_SUBJECTS, BAD], golden: "off", workers: 2 });
    const good = out.results.filter((r) => r.subjectName !== bad.name);
    expect(good).toHaveLength(partialCases.length * (CORRECT_SUBJECTS.length + OPTIMIZER_SUBJECTS.length));
    expect(good.filter((r) => failing(r.checks).length).map((r) => `${r.id}: ${failing(r.checks).join(", ")}`)).toEqual([]);
    const caught = out.results.filter((r) => r.subjectName === bad.name && failing(r.checks).includes("parity.norm")).map((r) => r.id);
    // every cell that sums real partials over 2 ranks with a norm that sees them: the unreduced ones with dp_replicate2
    // (an sp cell may pass it: norm weights are a small share of the norm, and their partials' cross term can stay within fp32's band)
    const unreduced2 = partialCases.filter((c) => c.model === "llama3-debug-unreduced" && c.layout.dp_replicate === 2 && !c.regime.startsWith("nonfinite"));
    expect(unreduced2.length).toBeGreaterThanOrEqual(4);
    for (const c of unreduced2) expect(caught.some((id) => id.includes(`/${c.model}/${c.dtype}/`) && id.includes(`/${c.regime}/`))).toBe(true);
    expect(caught.length).toBeGreaterThanOrEqual(unreduced2.length);
  });
});

describe("Partial(sum) gradients in the fuzzer", () => {
  it(`the fuzzer catches partial-as-shard within ${SELF_TEST_RUNS} cases, shrinks it to one Partial parameter, and the replay file reproduces it; bucketed passes that case`, { timeout: 300_000 }, async () => {
    const bad = await loadSubject(BAD);
    const run = await fuzzSubject(bad, { seed: envSeed(), numRuns: SELF_TEST_RUNS, targets: bad.catchBy, outDir, subjectSpec: BAD });
    expect(run.details.failed).toBe(true);
    const ce = run.counterexample!;
    expect(ce.violations.map((v) => v.id)).toEqual(["parity.norm"]);
    expect(ce.fuzzCase.params).toHaveLength(1);
    expect(ce.fuzzCase.params[0]!.placements.some((x) => x.kind === "partial")).toBe(true);
    const replayed = readCaseFile(ce.path);
    expect(replayed).toEqual(ce.fuzzCase);
    expect((await runFuzzCase(replayed, bad)).violations.map((v) => v.id)).toEqual(["parity.norm"]);
    for (const name of CORRECT_SUBJECTS) {
      expect((await runFuzzCase({ ...replayed, subject: name }, await loadSubject(name))).violations).toEqual([]);
    }
  });
});

/**
 * The fuzz pass of `npm test`: every correct built-in subject holds every fuzz property
 * (harness/fuzz/run.ts) on generated layouts, meshes, placements, stages and tie groups; the
 * optimizer-owned `titan-mtp` on its own cases (the finalize regime, training cases).
 *
 * The seed is fixed (CLIP_PARITY_FUZZ_SEED overrides it), so test names and runs are stable in CI;
 * CLIP_PARITY_FUZZ_RUNS sets the cases per subject (default 300: 1200 cells, a few seconds). A failure
 * prints the shrunk counterexample, its replay file and commands (`npx clip-parity cell --file ...`).
 * Longer runs: `npm run fuzz -- --runs 10000 [--seed S]`.
 */
import { describe } from "vitest";
import { it } from "@fast-check/vitest";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, OPTIMIZER_SUBJECTS } from "../../harness/registry/registry.ts";
import { caseArb } from "../../harness/fuzz/arbitraries.ts";
import { envSeed, fuzzParameters, fuzzPredicate } from "../../harness/fuzz/fuzz.ts";

const seed = envSeed();
const numRuns = Number(process.env.CLIP_PARITY_FUZZ_RUNS ?? 300);

describe(`fuzz: correct subjects hold every property (${numRuns} cases each)`, () => {
  for (const name of [...CORRECT_SUBJECTS, ...OPTIMIZER_SUBJECTS]) {
    const subject = BUILTIN_SUBJECTS[name]!;
    it.prop([caseArb({ subject: name, shape: subject.shape })], fuzzParameters(subject, { seed, numRuns }))(
      `${name} (tolerance ${subject.tolerance ?? "fp32"})`,
      fuzzPredicate(subject),
      120_000,
    );
  }
});

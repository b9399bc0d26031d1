/**
 * The suite that StrykerJS runs against each mutant of the correct subjects and the harness parts their
 * verdict depends on (`npm run mutation`, stryker.config.json): the cpu matrix's cells, one test per
 * cell, run in-process (runner option `workers: 0`) so that the instrumented modules are the ones that
 * run, each compared with golden/cpu.json (a mutant of the gradient rules changes what the subject is
 * given and what it is judged against alike: the golden shows it); and the unit tests of the harness
 * parts whose mutants no correct subject's cell can show (comm.budget's budget, the Partial slots).
 * Not part of `npm test`.
 */
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["suites/mutation/**/*.test.ts", "suites/unit/optimizer.test.ts", "suites/unit/comm-budget.test.ts", "suites/unit/partial.test.ts", "suites/unit/grad-specs.test.ts", "suites/checks-branches/**/*.test.ts", "suites/fuzz/bucket-oracle.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});

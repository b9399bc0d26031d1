/**
 * The suite that StrykerJS runs against each mutant of the correct subjects and the harness parts their
 * verdict depends on (`npm run mutation`, stryker.config.json): the cpu matrix's cells, one test per
 * cell, run in-process (runner option `workers: 0`) so that the instrumented modules are the ones that
 * run, each compared with golden/cpu.json (a mutant of the gradient rules changes what the subject is
 * given and what it is judged against alike: the golden shows it); and the unit tests of the harness
 * parts whose mutants no correct subject's cell can show (comm.budget's budget, the Partial slots).
 * Not part of `npm test`.
 *
 * MUTATION_SUITE=fast leaves out the suites that run whole cells of the cpu matrix, the regression cells and the
 * optimizer sections (suites/mutation/{cpu,regressions,optimizer}.test.ts): what is left runs in seconds and is
 * the suite a scoped run of the checks, the reference and the fuzz oracle is measured against on a 2-core machine
 * (`MUTATION_SUITE=fast npx stryker run --concurrency 1 --mutate <file>`). A mutant it does not kill may still be
 * killed by the cells; docs/strength.md says which suite each file's figures come from. MUTATION_EXCLUDE (paths,
 * comma-separated) leaves out more test files: Stryker refuses to start while a test fails, so a test broken by
 * work in progress elsewhere can be set aside for a scoped run (the suite's name in docs/strength.md says so).
 */
import { defineConfig } from "vitest/config";

const CELL_SUITES = ["suites/mutation/cpu.test.ts", "suites/mutation/regressions.test.ts", "suites/mutation/optimizer.test.ts"];

export default defineConfig({
  test: {
    include: ["suites/mutation/**/*.test.ts", "suites/unit/optimizer.test.ts", "suites/unit/comm-budget.test.ts", "suites/unit/partial.test.ts", "suites/unit/grad-specs.test.ts", "suites/checks-branches/**/*.test.ts", "suites/fuzz/bucket-oracle.test.ts"],
    exclude: [
      "**/node_modules/**",
      ...(process.env.MUTATION_SUITE === "fast" ? CELL_SUITES : []),
      ...(process.env.MUTATION_EXCLUDE ?? "").split(",").filter(Boolean),
    ],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});

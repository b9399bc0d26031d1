/**
 * The suite that StrykerJS runs against each mutant of the correct subjects (`npm run mutation`,
 * stryker.config.json): the cpu matrix's cells, one test per cell, run in-process (runner option
 * `workers: 0`) so that the instrumented subject modules are the ones that run. Not part of `npm test`.
 */
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["suites/mutation/**/*.test.ts", "suites/unit/optimizer.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});

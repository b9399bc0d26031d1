import { configDefaults, defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["suites/**/*.test.ts"],
    // The mutation suite runs under Stryker (npm run mutation, vitest.mutation.config.ts), not here.
    exclude: [...configDefaults.exclude, "suites/mutation/**"],
    // The matrix suite runs thousands of SPMD cells in one file; unit files run beside it.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: "forks",
  },
});

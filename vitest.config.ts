import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["suites/**/*.test.ts"],
    // The matrix suite runs thousands of SPMD cells in one file; unit files run beside it.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: "forks",
  },
});

/**
 * What the harness reads from its environment, in one place, so that every part agrees on it
 * (a CI check that accepted only CI=true once skipped whole suites under CI=1).
 */

/** Whether we run under CI: CI set to anything but "", "0" and "false" (any case), as CI services set it. */
export function isCI(env: NodeJS.ProcessEnv = process.env): boolean {
  const v = env.CI;
  return v !== undefined && v !== "" && v !== "0" && v.toLowerCase() !== "false";
}

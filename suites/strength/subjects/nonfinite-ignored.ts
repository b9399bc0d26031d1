/**
 * Test-local known-bad subject: `reference` that drops `error_if_nonfinite` (it always clips with
 * the flag off), so a non-finite norm is returned instead of raised. Only `errors.nonfinite` fails
 * (suites/strength/checks.test.ts).
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import reference from "../../../harness/subject/builtin/reference.ts";

export default defineSubject({
  name: "nonfinite-ignored",
  description: "reference with error_if_nonfinite ignored",
  tolerance: "exact",
  catchBy: ["errors.nonfinite"],
  async clip(rank, args) {
    return reference.clip(rank, { ...args, errorIfNonfinite: false }); // BUG: the caller asked for an error
  },
});

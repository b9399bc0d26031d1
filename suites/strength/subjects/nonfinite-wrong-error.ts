/**
 * Test-local known-bad subject: `reference` that, asked to raise on a non-finite norm, raises an
 * unrelated error instead (as a crash in the error path would). `errors.nonfinite` fails: the error
 * raised is not the one that was asked for (suites/strength/checks.test.ts).
 */
import { defineSubject } from "../../../harness/subject/api.ts";
import reference from "../../../harness/subject/builtin/reference.ts";

export default defineSubject({
  name: "nonfinite-wrong-error",
  description: "reference that raises an unrelated error where the non-finite error belongs",
  tolerance: "exact",
  catchBy: ["errors.nonfinite"],
  async clip(rank, args) {
    try {
      return await reference.clip(rank, args);
    } catch {
      throw new TypeError("cannot read properties of undefined (reading 'norm')"); // BUG: the real error is lost
    }
  },
});

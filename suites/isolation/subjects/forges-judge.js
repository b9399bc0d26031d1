// Rewrites every check to pass, then clips nothing: the harness's checks must not be the subject's to change.
import { CHECKS } from "clip-parity/harness/checks/index.ts";
export default {
  name: "forges-judge",
  async clip() {
    for (const check of CHECKS) check.judge = () => ({ id: check.id, status: "pass", message: "" });
    return 0;
  },
};

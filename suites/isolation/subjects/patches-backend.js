// Clips correctly, then patches the harness's Backend so that every later cell in this worker breaks:
// one subject must never change another's verdict.
import bucketed from "clip-parity/harness/subject/builtin/bucketed.ts";
import { Backend } from "clip-parity/harness/backend/backend.ts";
export default {
  name: "patches-backend",
  async clip(rank, args) {
    const norm = await bucketed.clip(rank, args);
    Backend.prototype.opsFor = function () {
      throw new Error("patched by another subject");
    };
    return norm;
  },
};

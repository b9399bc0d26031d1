import { defineCheck, fail, pass } from "./types.ts";

/** No collective mismatch and no rank waiting forever: what a real NCCL job would hang on. */
export default defineCheck({
  id: "liveness",
  description: "every rank issues the same collectives in the same order on each group; none hangs",
  canFail: (f) => f.world > 1,
  judge(ctx) {
    return ctx.liveness ? fail(this.id, ctx.liveness) : pass(this.id);
  },
});

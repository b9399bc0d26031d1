import { defineCheck, fail, pass } from "./types.ts";

const fmt = (n: number) => n.toLocaleString("en-US");

/** Scratch during the clip within budget: catches O(global params) gradient replication. */
export default defineCheck({
  id: "memory.peak",
  description: "scratch bytes during the clip stay within the rank's budget",
  judge(ctx) {
    for (const m of ctx.memory) {
      if (m.scratchPeakBytes > m.budgetBytes) {
        return fail(
          this.id,
          `rank ${m.rank}: scratch peak ${fmt(m.scratchPeakBytes)} bytes during the clip > budget ` +
            `${fmt(m.budgetBytes)} bytes (${ctx.budgets.scratchBytes === undefined ? "float32 size of its largest local shard + 1 MiB" : "the matrix's budget"})`,
        );
      }
    }
    const worst = Math.max(0, ...ctx.memory.map((m) => m.scratchPeakBytes));
    return pass(this.id, `max scratch ${fmt(worst)} bytes`);
  },
});

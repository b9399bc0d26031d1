import { defineCheck, fail, pass } from "./types.ts";
import { DEFAULT_SCRATCH_SLACK_BYTES, type Budgets } from "../cell/cell.ts";

const fmt = (n: number) => n.toLocaleString("en-US");

function budgetText(b: Budgets): string {
  if (b.scratchBytes !== undefined) return "the matrix's budget";
  const slack = b.scratchSlackBytes ?? DEFAULT_SCRATCH_SLACK_BYTES;
  return `float32 size of its largest local shard + ${slack === DEFAULT_SCRATCH_SLACK_BYTES ? "1 MiB" : `${fmt(slack)} bytes`}`;
}

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "fail: scratch over budget on a rank other than 0",
  "pass: scratch within budget",
] as const;

/** Scratch during the clip within budget: catches O(global params) gradient replication. */
export default defineCheck({
  id: "memory.peak",
  severity: "correctness",
  description: "scratch bytes during the clip stay within the rank's budget",
  canFail: (f) => f.paramsWithGrad > 0,
  judge(ctx) {
    for (const m of ctx.memory) {
      if (m.scratchPeakBytes > m.budgetBytes) {
        return fail(
          this.id,
          `rank ${m.rank}: scratch peak ${fmt(m.scratchPeakBytes)} bytes during the clip > budget ` +
            `${fmt(m.budgetBytes)} bytes (${m.budgetRule ?? budgetText(ctx.budgets)})`,
        );
      }
    }
    const worst = Math.max(0, ...ctx.memory.map((m) => m.scratchPeakBytes));
    return pass(this.id, `max scratch ${fmt(worst)} bytes`);
  },
});

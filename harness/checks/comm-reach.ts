import { defineCheck, fail, pass, skip } from "./types.ts";
import type { CheckContext } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: no reach reported (an external runtime)",
  "skip: the meta backend holds no values",
  "fail: a rank other than 0 returned a norm its collectives could not have told it",
  "tolerate: a rank that raised is not judged",
  "tolerate: ranks that hold every element need no collective",
  "pass: every rank's norm reached it",
] as const;

/**
 * A rank's norm can only come from the gradients whose data reached it: its own, and those of the ranks
 * it is joined to by completed collectives (World.reach: an all_reduce or all_gather joins every member,
 * a broadcast brings its source's). A rank that returned a norm although those ranks together hold less
 * than every element of some logical parameter with a gradient answered from somewhere other than the
 * collectives: the generator recognised from its own block, a cache or a file shared outside them.
 *
 * A lower bound, never a demand for a collective a correct subject would skip: replicas and Partial
 * copies count as the coordinates they hold, so ranks that hold everything (one rank, pure replication)
 * need none. An external runtime that reports no reach (the torch adapter reports one) and a meta cell: skipped.
 */
export default defineCheck({
  id: "comm.reach",
  severity: "correctness",
  description: "a rank's norm depends only on gradients that reached it through collectives",
  canFail: (f) => f.world > 1 && f.paramsWithGrad > 0,
  judge(ctx) {
    if (!ctx.reach) return skip(this.id, "the subject's runtime reports no collectives' reach (an external runtime)");
    if (ctx.backend.isMeta) return skip(this.id, "a meta cell holds no values to know");
    const missing = unreached(ctx, ctx.reach);
    return missing ? fail(this.id, missing) : pass(this.id);
  },
});

/** The first rank that returned a norm without the data to compute it, said in words; null if none. */
function unreached(ctx: CheckContext, reach: readonly (readonly number[])[]): string | null {
  const need = new Map<string, number>();
  ctx.plan.forEach((params, rank) =>
    params.forEach((p, i) => {
      if (ctx.grads[rank]![i]) need.set(p.name, p.block.globalShape.reduce((a, b) => a * b, 1));
    }),
  );
  for (const o of ctx.outcomes) {
    if (o.error || typeof o.value !== "number") continue;
    const from = reach[o.rank] ?? [o.rank];
    const seen = new Map<string, Set<string>>();
    const covered = new Map<string, number>();
    for (const q of from) {
      ctx.plan[q]!.forEach((p, i) => {
        if (!ctx.grads[q]![i]) return;
        const key = `${p.block.start.join(",")}+${p.block.len.join(",")}`;
        const keys = seen.get(p.name) ?? new Set<string>();
        if (keys.has(key)) return;
        keys.add(key);
        seen.set(p.name, keys);
        covered.set(p.name, (covered.get(p.name) ?? 0) + p.numel);
      });
    }
    for (const [name, numel] of need) {
      const have = covered.get(name) ?? 0;
      if (have < numel) {
        return (
          `rank ${o.rank} returned a norm (${o.value}), but the collectives it completed joined it only to ranks [${from.join(",")}], ` +
          `which hold ${have.toLocaleString("en-US")} of the ${numel.toLocaleString("en-US")} elements of ${name}: the rest it cannot have known`
        );
      }
    }
  }
  return null;
}

import { type Tensor } from "../subject/api.ts";
import { clipCoefficient } from "../numerics/numerics.ts";
import { defineCheck, fail, globalIndex, notComparable, pass, skip, scaled } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: a rank raised",
  "skip: no tied replica",
  "fail: one replica of several left unscaled, on the middle stage",
  "fail: one replica of several left unscaled, on the last stage",
  "fail: a replica whose shards line up with no canonical shard, left unscaled",
  "pass: every replica scaled like its canonical copy",
] as const;

/** Every physical copy of a tied parameter is scaled by one coefficient and stays bitwise equal. */
export default defineCheck({
  id: "scaling.replicas",
  severity: "correctness",
  description: "all physical copies of a tied parameter are scaled alike and stay bitwise equal",
  canFail: (f) => scaled(f) && f.tiedReplica,
  judge(ctx) {
    const why = notComparable(ctx);
    if (why) return skip(this.id, why);
    const canonical = new Map<string, { rank: number; grad: Tensor }>();
    for (const [rank, params] of ctx.plan.entries()) {
      params.forEach((p, i) => {
        const grad = ctx.grads[rank][i];
        if (p.canonical && p.tieGroup && grad) canonical.set(`${p.name}@${p.block.start}:${p.block.len}`, { rank, grad });
      });
    }
    let compared = 0;
    for (const [rank, params] of ctx.plan.entries()) {
      for (const [i, p] of params.entries()) {
        const grad = ctx.grads[rank][i];
        if (p.canonical || !grad) continue;
        compared++;
        const twin = canonical.get(`${p.name}@${p.block.start}:${p.block.len}`);
        if (twin) {
          const m = ctx.backend.compare(grad, twin.grad);
          if (m) {
            return fail(
              this.id,
              `rank ${rank}, replica ${p.fqn} differs from ${p.name} on rank ${twin.rank} at element ` +
                `${globalIndex(p.block, m.index)}: ${m.expected} (replica) vs ${m.actual} (canonical)`,
            );
          }
          continue;
        }
        // Shards that line up with no canonical shard: check against the coefficient directly.
        const coef = clipCoefficient(ctx.maxNorm, ctx.outcomes[rank].value as number);
        const m = ctx.backend.verifyScaled(grad, ctx.genSpec(p), p.block, coef);
        if (m) {
          return fail(
            this.id,
            `rank ${rank}, replica ${p.fqn} of ${p.name}, element ${globalIndex(p.block, m.index)}: ` +
              `got ${m.actual}, expected ${m.expected} (scaled by ${coef} like its canonical copy)`,
          );
        }
      }
    }
    return compared ? pass(this.id, `${compared} replica shards`) : skip(this.id, "no tied replica in this cell");
  },
});

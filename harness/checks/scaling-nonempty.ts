import { clipCoefficient } from "../numerics/numerics.ts";
import { defineCheck, fail, notComparable, pass, skip, scaled } from "./types.ts";

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: a rank raised",
  "skip: clip_coef >= 1, nothing to scale",
  "fail: gradients left unscaled on a rank other than 0",
  "fail: an optimizer's tied copy left as the raw partial it was given",
  "pass: every gradient scaled",
] as const;

/**
 * When clip_coef < 1 every present gradient was really scaled: catches grads passed where
 * parameters were expected, so nothing is scaled while the reported norm still looks right.
 * Absent gradients stay absent by construction: a subject gets frozen views and cannot add one.
 */
export default defineCheck({
  id: "scaling.nonempty",
  severity: "correctness",
  description: "when clip_coef < 1, every present gradient was scaled",
  canFail: scaled,
  judge(ctx) {
    const why = notComparable(ctx);
    if (why) return skip(this.id, why);
    if (!(ctx.clipCoef < 1)) return skip(this.id, `clip_coef is ${ctx.clipCoef}: nothing to scale`);
    for (const [rank, params] of ctx.plan.entries()) {
      const coef = clipCoefficient(ctx.maxNorm, ctx.outcomes[rank].value as number);
      for (const [i, p] of params.entries()) {
        const grad = ctx.grads[rank][i];
        if (!grad) continue;
        const gen = ctx.genSpec(p);
        // what the harness put there (an optimizer-shaped subject's tied copy: a raw partial)
        const input = ctx.inputSpec(p);
        const holds = (spec: typeof gen) => !ctx.backend.verifyScaled(grad, spec, p.block, 1);
        // unclipped: the logical gradient (finalized, never scaled) or the input itself (not even finalized)
        if (ctx.backend.verifyScaled(grad, gen, p.block, coef) && (holds(gen) || (input !== gen && holds(input)))) {
          return fail(
            this.id,
            `rank ${rank}, ${p.fqn}: the gradient was not scaled (it still holds its unclipped values; clip_coef ${coef})`,
          );
        }
      }
    }
    return pass(this.id);
  },
});

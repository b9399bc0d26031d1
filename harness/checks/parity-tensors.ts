import { clipCoefficient } from "../clip/api.ts";
import type { VerifyItem } from "../backend/backend.ts";
import type { LocalParam } from "../model/plan.ts";
import { defineCheck, fail, globalIndex, notComparable, pass, skip } from "./types.ts";

/** A value as a message shows it: -0 with its sign (a bitwise mismatch of +0 and -0 would read "got 0, expected 0"). */
const signed = (x: number): string => (Object.is(x, -0) ? "-0" : String(x));

/**
 * Every clipped element equals round(float32(g) * c): c is the reference's coefficient for the
 * `exact` class, else the one the rank's own norm gives (SPEC §6).
 */
export default defineCheck({
  id: "parity.tensors",
  description: "every clipped gradient element equals round(float32(g) * clip_coef)",
  judge(ctx) {
    const why = notComparable(ctx);
    if (why) return skip(this.id, why);
    // Every local gradient of every rank, in rank then parameter order, verified in one native call
    // that reports the first mismatch in that order.
    const items: VerifyItem[] = [];
    const where: { rank: number; p: LocalParam }[] = [];
    for (const [rank, params] of ctx.plan.entries()) {
      const norm = ctx.outcomes[rank].value as number;
      const coef = ctx.tolerance === "exact" ? ctx.clipCoef : clipCoefficient(ctx.maxNorm, norm);
      for (const [i, p] of params.entries()) {
        const grad = ctx.grads[rank][i];
        if (!grad) continue;
        items.push({ tensor: grad, gen: ctx.genSpec(p), block: p.block, coef });
        where.push({ rank, p });
      }
    }
    const found = ctx.backend.verifyScaledMany(items);
    if (found) {
      const { rank, p } = where[found.item];
      const { coef } = items[found.item];
      const m = found.mismatch;
      return fail(
        this.id,
        `rank ${rank}, ${p.fqn}${p.canonical ? "" : ` (replica of ${p.name})`}, element ${globalIndex(p.block, m.index)}: ` +
          `got ${signed(m.actual)}, expected ${signed(m.expected)} = round(g * ${coef})`,
      );
    }
    return pass(this.id, `${items.length} local gradients`);
  },
});

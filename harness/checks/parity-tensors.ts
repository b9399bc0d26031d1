import { clipCoefficient } from "../numerics/numerics.ts";
import type { VerifyItem } from "../backend/backend.ts";
import type { LocalParam } from "../model/plan.ts";
import { defineCheck, fail, globalIndex, lowPrecisionCoefs, lowPrecisionDtype, notComparable, pass, skip, scaled } from "./types.ts";

/** A value as a message shows it: -0 with its sign (a bitwise mismatch of +0 and -0 would read "got 0, expected 0"). */
const signed = (x: number): string => (Object.is(x, -0) ? "-0" : String(x));

/**
 * Where this check's verdict can go: each branch has its test in suites/checks-branches/branches.test.ts
 * (named by it), seen to fail with that branch weakened.
 */
export const BRANCHES = [
  "skip: a rank raised",
  "fail: a gradient off on a rank other than 0",
  "exact class: judged by the reference's coefficient, not the rank's own norm",
  "bf16 class: a coefficient held in the gradients' dtype is accepted there only",
  "pass: every gradient scaled by its rank's coefficient",
] as const;

/**
 * Every clipped element equals round(float32(g) * c): c is the reference's coefficient for the
 * `exact` class, else the one the rank's own norm gives (SPEC §6). In the `bf16` class (a subject that
 * reduces in the gradients' own low precision, as PyTorch does for bfloat16 and float16 gradients) a rank
 * may instead have held that coefficient in the gradients' dtype, computed as PyTorch's clips compute it
 * (low-precision.ts); it must then have scaled every one of its gradients by one such coefficient.
 */
export default defineCheck({
  id: "parity.tensors",
  severity: "correctness",
  description: "every clipped gradient element equals round(float32(g) * clip_coef)",
  canFail: scaled,
  judge(ctx) {
    const why = notComparable(ctx);
    if (why) return skip(this.id, why);
    const perRank = ctx.plan.map((params, rank) => {
      const norm = ctx.outcomes[rank].value as number;
      const coef = ctx.tolerance === "exact" ? ctx.clipCoef : clipCoefficient(ctx.maxNorm, norm);
      const items: VerifyItem[] = [];
      const where: LocalParam[] = [];
      for (const [i, p] of params.entries()) {
        const grad = ctx.grads[rank][i];
        if (!grad) continue;
        items.push({ tensor: grad, gen: ctx.genSpec(p), block: p.block, coef });
        where.push(p);
      }
      return { rank, norm, items, where };
    });
    // Every local gradient of every rank, in rank then parameter order, verified in one native call
    // that reports the first mismatch in that order.
    const all = perRank.flatMap((r) => r.items);
    const where = perRank.flatMap((r) => r.where.map((p) => ({ rank: r.rank, p })));
    let found = ctx.backend.verifyScaledMany(all);
    if (found && lowPrecisionDtype(ctx)) {
      // rank by rank: the float32 coefficient, else one held in the gradients' dtype, for all of them
      found = null;
      let offset = 0;
      for (const r of perRank) {
        const at32 = ctx.backend.verifyScaledMany(r.items);
        if (at32 && lowPrecisionCoefs(ctx, r.norm).every((low) => ctx.backend.verifyScaledMany(r.items.map((it) => ({ ...it, coef: low }))))) {
          found = { item: offset + at32.item, mismatch: at32.mismatch };
          break;
        }
        offset += r.items.length;
      }
    }
    if (found) {
      const { rank, p } = where[found.item]!;
      const { coef } = all[found.item]!;
      const low = lowPrecisionCoefs(ctx, perRank[rank]!.norm);
      const m = found.mismatch;
      return fail(
        this.id,
        `rank ${rank}, ${p.fqn}${p.canonical ? "" : ` (replica of ${p.name})`}, element ${globalIndex(p.block, m.index)}: ` +
          `got ${signed(m.actual)}, expected ${signed(m.expected)} = round(g * ${coef})` +
          (low.length ? `, nor round(g * c) for c in ${low.join(", ")} (the coefficient held in ${ctx.cell.dtype})` : ""),
      );
    }
    return pass(this.id, `${all.length} local gradients`);
  },
});

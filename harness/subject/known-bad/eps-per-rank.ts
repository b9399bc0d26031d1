/**
 * `eps-per-rank`: the clip's `+ 1e-6` added to every rank's partial norm before the sum reduction, as
 * torch's `clip_grad_norm_` did on DTensor gradients (pytorch issues 145218, 149768, 163193): the total
 * norm is a DTensor whose placement is `_NormPartial(p)` (each rank holds the p-norm n_r of its local
 * shards; the reduction is (sum_r n_r^p)^(1/p)), and `max_norm / (total_norm + 1e-6)` added the 1e-6 to
 * every rank's local n_r before the division reduced it. The coefficient is then
 *
 *     clip_coef = max_norm / (sum_r (n_r + 1e-6)^p)^(1/p)     instead of     max_norm / (norm + 1e-6),
 *
 * while the norm it returns (reduced on its own, when read) is right. Where a sum reduction joins
 * several partial norms (finite p, a reduction group of 2+ ranks or pp > 1), the denominator is more than
 * norm + 1e-6: far more when the norm is far below 1e-6 (the `tiny` regime: about k^(1/p) * 1e-6 for k
 * partial norms, against 1e-6), so every gradient is scaled by a coefficient up to k^(1/p) times too
 * small. With one rank in the sum, or for inf (MAX: max_r(n_r + 1e-6) = max_r n_r + 1e-6), the 1e-6 is
 * added once and the coefficient is right. Caught by `parity.tensors` (the norm is the reference's).
 *
 * The model: `exact`'s clip (one all_reduce per reduction group with exact accumulators, then pp), each
 * rank's partial norm per reduction group n_r = acc^(1/p) in float64, and the coefficient's denominator
 * D = (sum_r (n_r + 1e-6)^p)^(1/p) over the same ranks and groups the norm's sum joins. Torch reduces the
 * two separately; here both sums travel in the same all_reduce (as a framework fuses scalars into one
 * tensor), so the collectives are `exact`'s and only the coefficient differs: the subject API's
 * all_reduce carries one value, and an exact one holds both, the second above bit PACK_SHIFT (every term
 * is non-negative, so the two never mix). The coefficient is computed as torch's float32 arithmetic gives
 * it where the 1e-6 is added once, plus the excess the bug adds, D - (norm + 1e-6) in float64: so with one
 * partial norm in the sum it is bit for bit the correct one (the excess is float64 rounding, far below a
 * float32 ulp of the denominator), and the bug alone makes the difference.
 */
import { defineSubject, normFromPowerSum, type Exact, type ParamView, type RankContext } from "../api.ts";
import { checkFinite, exactBuckets, exactPowerSum, finishClip, scaleAll } from "../common.ts";

/** torch's `1e-6`, rounded to float32 as its tensor arithmetic rounds it. */
const EPS = Math.fround(1e-6);
/** Exact sums are integers times 2^-1074, below 2^2098 per float64 and 2^2160 for any sum of them: the second sum lives above. */
const PACK_SHIFT = 2176n;
const LOW = (1n << PACK_SHIFT) - 1n;

/** A finite non-negative float64 as an exact integer count of 2^-1074. */
function units(x: number): bigint {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const exp = (bits >> 52n) & 0x7ffn;
  const frac = bits & ((1n << 52n) - 1n);
  return exp === 0n ? frac : (frac | (1n << 52n)) << (exp - 1n);
}

/** The norm's exact power sum and the buggy denominator's sum_r (n_r + 1e-6)^p, over every group and stage. */
async function sums(rank: RankContext, params: readonly ParamView[], normType: number): Promise<{ total: number; withEps: number }> {
  const ops = rank.ops;
  const buckets = await exactBuckets(rank, params, normType);
  let stage = ops.exactZero();
  for (const b of buckets.values()) {
    // this rank's partial norm of the group, with the 1e-6 added to it (BUG), raised back to p
    const partialNorm = ops.exactToNumber(b.acc) ** (1 / normType);
    const withEps = b.acc.nonfinite === 0 ? units((partialNorm + EPS) ** normType) : 0n;
    const packed: Exact = { sum: b.acc.sum + (withEps << PACK_SHIFT), nonfinite: b.acc.nonfinite };
    stage = ops.exactAdd(stage, await rank.allReduce(b.group, packed, "sum"));
  }
  const all = await rank.allReduce(rank.group("pp"), stage, "sum");
  return {
    total: ops.exactToNumber({ sum: all.sum & LOW, nonfinite: all.nonfinite }),
    withEps: ops.exactToNumber({ sum: all.sum >> PACK_SHIFT, nonfinite: 0 }),
  };
}

export default defineSubject({
  name: "eps-per-rank",
  description: "the clip's + 1e-6 added to every rank's partial norm before the sum reduction (torch's DTensor clip_grad_norm_, issues 145218/149768/163193)",
  tolerance: "exact",
  catchBy: ["parity.tensors"],
  async clip(rank, args) {
    const { normType, maxNorm } = args;
    // MAX: max_r(n_r + 1e-6) = max_r n_r + 1e-6, the 1e-6 is added once: `exact`'s clip
    if (normType === Infinity) return finishClip(rank, args, (await exactPowerSum(rank, args.params, normType)).total);
    const { total, withEps } = await sums(rank, args.params, normType);
    const norm = normFromPowerSum(total, normType);
    checkFinite(norm, args);
    const f32 = Math.fround;
    let coef: number;
    if (!Number.isFinite(norm)) coef = f32(f32(maxNorm) / f32(norm + EPS)); // Inf: 0, NaN: NaN, as torch
    else {
      // BUG: D - (norm + 1e-6); nothing to add when no partial norm entered a sum (no gradient anywhere)
      const excess = withEps === 0 ? 0 : withEps ** (1 / normType) - (total ** (1 / normType) + EPS);
      coef = Math.min(1, f32(f32(maxNorm) / f32(f32(f32(norm) + EPS) + excess)));
    }
    scaleAll(rank, args.params, coef);
    return norm;
  },
});

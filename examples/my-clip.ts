/**
 * A complete user subject: the distributed clip of a hypothetical trainer, written as SPMD code.
 * Run it with:
 *   npx clip-parity cell --subject ./examples/my-clip.ts --layout pp2,dp_shard2,ep2 \
 *     --model deepseek-v3-debug --dtype f32 --norm 2 --regime active
 *   npx clip-parity run --matrix gpu4 --backend cpu --subject ./examples/my-clip.ts
 * CI runs it on the cpu matrix and through 1,000 fuzz cases (.ci/run).
 */
import { clipCoefficient, defineSubject, NonFiniteNormError, normFromPowerSum, type ParamView, type RankContext, type Tensor } from "clip-parity";

/**
 * norm^p (max for inf) of p's logical local gradient. A Partial(sum) gradient holds one addend per rank
 * of its Partial axes: its norm is that of their sum, so the addends are summed first (on a scratch copy:
 * the gradient itself stays a partial, and scaling a partial scales the sum).
 */
async function localNormPow(rank: RankContext, p: ParamView, grad: Tensor, normType: number): Promise<number> {
  const measure = (g: Tensor) => (normType === Infinity ? rank.ops.maxAbs(g) : rank.ops.sumAbsPow(g, normType));
  const partialAxes = rank.groupOf(p, p.placements.map((x) => x.kind === "partial"));
  if (partialAxes.ranks.length === 1) return measure(grad);
  const sum = rank.ops.clone(grad);
  try {
    await rank.allReduceTensor(partialAxes, sum, "sum");
    return measure(sum);
  } finally {
    rank.ops.free(sum); // on the error path too: a collective may raise
  }
}

export default defineSubject({
  name: "my-clip",
  description: "one all_reduce per (mesh, Shard axes) bucket, then pp; float64 partial sums",
  tolerance: "fp32",
  async clip(rank, { params, maxNorm, normType, errorIfNonfinite }) {
    const inf = normType === Infinity;
    const op = inf ? "max" : "sum";
    const buckets = new Map<string, { group: ReturnType<typeof rank.groupOf>; acc: number }>();
    for (const p of params) {
      if (!p.grad || !p.canonical) continue; // a tied copy counts once: only its canonical copy
      // only Shard axes split the gradient: Replicate copies, and Partial ones once summed, are equal
      const group = rank.groupOf(p, p.placements.map((x) => x.kind === "shard")); // flags align with p.meshAxes
      const b = buckets.get(group.key) ?? { group, acc: 0 };
      const local = await localNormPow(rank, p, p.grad, normType);
      b.acc = inf ? Math.max(b.acc, local) : b.acc + local;
      buckets.set(group.key, b);
    }
    let total = 0;
    for (const b of buckets.values()) {
      const reduced = await rank.allReduce(b.group, b.acc, op);
      total = inf ? Math.max(total, reduced) : total + reduced;
    }
    total = await rank.allReduce(rank.group("pp"), total, op);
    const norm = normFromPowerSum(total, normType);
    if (errorIfNonfinite && !Number.isFinite(norm)) throw new NonFiniteNormError(normType, norm);
    const coef = clipCoefficient(maxNorm, norm);
    for (const p of params) if (p.grad) rank.ops.scale_(p.grad, coef); // every copy, replicas too
    return norm;
  },
});

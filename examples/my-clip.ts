/**
 * A complete user subject: the distributed clip of a hypothetical trainer, written as SPMD code.
 * Run it with:
 *   npx clip-parity cell --subject ./examples/my-clip.ts --layout pp2,dp_shard2,ep2 \
 *     --model deepseek-v3-debug --dtype f32 --norm 2 --regime active
 *   npx clip-parity run --matrix gpu4 --backend cpu --subject ./examples/my-clip.ts
 */
import { clipCoefficient, defineSubject, NonFiniteNormError, normFromPowerSum } from "clip-parity";

export default defineSubject({
  name: "my-clip",
  description: "one all_reduce per (mesh, reduce axes) bucket, then pp; float64 partial sums",
  tolerance: "fp32",
  async clip(rank, { params, maxNorm, normType, errorIfNonfinite }) {
    const inf = normType === Infinity;
    const op = inf ? "max" : "sum";
    const buckets = new Map<string, { group: ReturnType<typeof rank.groupOf>; acc: number }>();
    for (const p of params) {
      if (!p.grad || !p.canonical) continue; // a tied copy counts once: only its canonical copy
      const group = rank.groupOf(p, p.placements.map((x) => x.kind !== "replicate")); // flags align with p.meshAxes
      const b = buckets.get(group.key) ?? { group, acc: 0 };
      const local = inf ? rank.ops.maxAbs(p.grad) : rank.ops.sumAbsPow(p.grad, normType);
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

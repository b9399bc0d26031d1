// A user subject in plain JavaScript with a bug: it never reduces over the pipeline axis.
export default {
  name: "forgets-pp",
  description: "buckets by group but skips the pp all_reduce",
  async clip(rank, { params, maxNorm, normType }) {
    let local = 0;
    for (const p of params) if (p.grad && p.canonical) local += rank.ops.sumAbsPow(p.grad, normType);
    const total = await rank.allReduce(rank.group("dp_replicate", "dp_shard", "cp", "tp"), local, "sum");
    const norm = Math.fround(Math.sqrt(total));
    const coef = Math.min(1, Math.fround(Math.fround(maxNorm) / Math.fround(norm + Math.fround(1e-6))));
    for (const p of params) if (p.grad) rank.ops.scale_(p.grad, coef);
    return norm;
  },
};

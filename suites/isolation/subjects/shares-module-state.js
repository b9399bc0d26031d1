// Ranks exchange their partial sums through a module-level array instead of a collective: a cell
// whose ranks met outside the collectives must not pass. On dp_shard2 every parameter is Shard(0), so
// the ranks' local sums partition the norm; each rank waits a while for the others, then gives up.
const partials = [];
export default {
  name: "shares-module-state",
  async clip(rank, { params, maxNorm, normType }) {
    let local = 0;
    for (const p of params) if (p.grad && p.canonical) local += rank.ops.sumAbsPow(p.grad, normType);
    partials[rank.rank] = local;
    for (let i = 0; i < 1000 && partials.filter((x) => x !== undefined).length < rank.world; i++) await new Promise((r) => setImmediate(r));
    const total = partials.reduce((a, b) => a + (b ?? 0), 0);
    const norm = Math.fround(Math.sqrt(total));
    const coef = Math.min(1, Math.fround(Math.fround(maxNorm) / Math.fround(norm + Math.fround(1e-6))));
    for (const p of params) if (p.grad) rank.ops.scale_(p.grad, coef);
    return norm;
  },
};

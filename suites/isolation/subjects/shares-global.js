// Ranks exchange their partial sums through a global instead of a collective (see shares-module-state.js).
export default {
  name: "shares-global",
  async clip(rank, { params, maxNorm, normType }) {
    let local = 0;
    for (const p of params) if (p.grad && p.canonical) local += rank.ops.sumAbsPow(p.grad, normType);
    globalThis.__partials ??= [];
    globalThis.__partials[rank.rank] = local;
    const partials = globalThis.__partials;
    for (let i = 0; i < 1000 && partials.filter((x) => x !== undefined).length < rank.world; i++) await new Promise((r) => setImmediate(r));
    const norm = Math.fround(Math.sqrt(partials.reduce((a, b) => a + (b ?? 0), 0)));
    const coef = Math.min(1, Math.fround(Math.fround(maxNorm) / Math.fround(norm + Math.fround(1e-6))));
    for (const p of params) if (p.grad) rank.ops.scale_(p.grad, coef);
    return norm;
  },
};

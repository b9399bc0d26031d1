// Issue 41: a TypeScript subject that claims the PyTorch adapter's hook, so that its own report of memory,
// collectives and liveness would replace the ledger's and the world's.
export default {
  name: "external-hook",
  async clip() {
    return 0;
  },
  async external({ world }) {
    const k = () => ({ calls: 0, bytes: 0 });
    const comm = { calls: 0, bytes: 0, byKind: { all_reduce: k(), all_gather: k(), broadcast: k(), barrier: k() }, byGroup: {} };
    return { ranks: Array.from({ length: world }, (_, rank) => ({ rank, value: 1 })), liveness: null, comm: Array.from({ length: world }, () => comm) };
  },
};

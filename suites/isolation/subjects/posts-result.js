// Posts a passing result for the cells around it on the worker's port, then clips nothing.
import { parentPort } from "node:worker_threads";
const pass = (id) => ({ id, status: "pass", message: "" });
export default {
  name: "posts-result",
  async clip(rank) {
    if (rank.rank === 0) {
      for (let index = 0; index < 4; index++) {
        const checks = ["parity.norm", "parity.tensors", "parity.ranks", "scaling.nonempty", "scaling.replicas", "liveness", "errors.nonfinite", "memory.peak", "memory.leak", "comm.budget"].map(pass);
        const result = { id: `forged-${index}`, cell: {}, backend: "cpu", subjectName: "posts-result", maxNorm: 1, errorIfNonfinite: false, totalNorm: 0, referenceNorm: 0, clipCoef: 1, checks, ranks: [], memory: [], comm: [], liveness: null, repro: "", durationMs: 0 };
        parentPort?.postMessage({ type: "result", index, result });
        parentPort?.postMessage({ type: "result", index, result }); // a second one for the same job
      }
    }
    return 0;
  },
};

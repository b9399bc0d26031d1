/**
 * `drop-tied`: a loader that restores a tied parameter into its canonical copy only; the replica on
 * another PP stage (the MTP layer's embedding, a tied output) keeps its initial value and zero
 * optimizer state. resume.equal must catch it on a model with a replica on another stage.
 */
import { loadCheckpoint, type CheckpointLoader } from "../checkpoint.ts";

const dropTied: CheckpointLoader = {
  name: "drop-tied",
  description: "loads a tied parameter into its canonical copy only: the replica keeps its initial value and zero state",
  load(backend, dir, index, s) {
    // The loader only ever sees the canonical copies; the step it restores is the whole state's.
    const canonicalOnly = { ...s, ranks: s.ranks.map((copies) => copies.filter((c) => c.lp.canonical)) };
    loadCheckpoint(backend, dir, index, canonicalOnly);
    s.step = canonicalOnly.step;
  },
};

export default dropTied;

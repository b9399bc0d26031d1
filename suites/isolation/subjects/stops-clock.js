// Tells the pool its code stopped running, then loops forever: the wall clock must still end it.
import { parentPort } from "node:worker_threads";
export default {
  name: "stops-clock",
  async clip() {
    for (let index = 0; index < 4; index++) parentPort?.postMessage({ type: "subject", index, running: false });
    for (;;) {}
  },
};

// Issue 41: init-unsynced (its tied copies train apart) after making the addon's tensor comparison say
// every pair of tensors is equal: train.parity judged in this thread would pass it.
import { createRequire } from "node:module";
import initUnsynced from "clip-parity/harness/subject/known-bad/init-unsynced.ts";

const { NativeStore } = createRequire(import.meta.url)("../../../native/index.cjs");
NativeStore.prototype.compare = () => null;

export default { ...initUnsynced, name: "patches-compare", catchBy: undefined };

// Issue 55: walks everything a subject can reach from what the harness hands it (the rank context, the
// clip's arguments, the groups it asks for, their prototypes) and the native addon's exports, and reports
// every property it could rewrite and every object it could extend, as its rank 0's error; `process` and
// globalThis must take no new property (ranks could meet there), and the addon must not compute a
// reference. A correct clip (bucketed's) runs first on every rank, so the cell is otherwise judged as usual.
import { createRequire } from "node:module";
import bucketed from "clip-parity/harness/subject/builtin/bucketed.ts";

const addon = createRequire(import.meta.url)("../../../native/index.cjs");

/** The language's own objects are sealed by the worker's seal; the walk reports the rest. */
function walk(roots) {
  const found = [];
  const seen = new Set();
  const visit = (value, path, depth) => {
    if ((typeof value !== "object" && typeof value !== "function") || value === null || seen.has(value) || depth > 12) return;
    seen.add(value);
    if (Object.isExtensible(value)) found.push(`${path}: extensible`);
    for (const key of Reflect.ownKeys(value)) {
      const d = Object.getOwnPropertyDescriptor(value, key);
      const at = `${path}.${String(key)}`;
      if (d.configurable) found.push(`${at}: configurable`);
      if ("value" in d) {
        if (d.writable) found.push(`${at}: writable`);
        visit(d.value, at, depth + 1);
      } else {
        visit(d.get, `${at}<get>`, depth + 1);
        visit(d.set, `${at}<set>`, depth + 1);
      }
    }
    visit(Object.getPrototypeOf(value), `${path}.__proto__`, depth + 1);
  };
  for (const [name, root] of Object.entries(roots)) visit(root, name, 0);
  return found;
}

export default {
  name: "walks-reachable",
  async clip(rank, args) {
    const norm = await bucketed.clip(rank, args);
    if (rank.rank === 0) {
      // the walk must see what is writable: an object of the subject's own is (a walk that finds nothing proves nothing)
      const control = walk({ control: { mine: 1 } });
      if (control.join("; ") !== "control: extensible; control.mine: configurable; control.mine: writable") throw new Error(`the walk is blind: ${control.join("; ")}`);
      const found = walk({ rank, args, addon, group: rank.group("tp"), stageGroup: rank.groupOf("dense", []) });
      if (Object.isExtensible(process)) found.push("process: extensible");
      if (Object.isExtensible(globalThis)) found.push("globalThis: extensible");
      for (const name of ["exactFull", "maxAbsFull"]) if (typeof addon[name] === "function") found.push(`addon.${name}: present`);
      if (found.length) throw new Error(`reachable and not frozen (${found.length}): ${found.slice(0, 400).join("; ")}`);
    }
    return norm;
  },
};

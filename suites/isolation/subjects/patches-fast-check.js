// Issue 55: hf-replicate (it counts a replicated gradient once per replica) after making fast-check, in its
// own thread, report every property as holding. The fuzzer's search ran in the subject's worker, where
// fast-check is the harness's own instance: the patch made `clip-parity fuzz` pass a known bug there.
import fc from "fast-check";
import hfReplicate from "clip-parity/harness/subject/known-bad/hf-replicate.ts";

let patched = false;
try {
  // every async property's run reports success: fast-check's own classes are reachable from any property
  const proto = Object.getPrototypeOf(fc.asyncProperty(fc.constant(0), async () => {}));
  for (let o = proto; o && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
    if (Object.hasOwn(o, "run")) o.run = async () => null;
  }
  patched = true;
} catch {
  // fast-check sealed: nothing to patch
}

export default { ...hfReplicate, name: "patches-fast-check", description: `hf-replicate with fast-check ${patched ? "patched" : "not patchable"} in its thread`, catchBy: undefined };

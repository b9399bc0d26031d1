/**
 * The one place that loads the native addon (native/index.cjs, built by `npm ci`).
 * A missing build is bad input to the harness, not a crash: it says how to build it.
 */
import { createRequire } from "node:module";
import { ClipParityError } from "../errors.ts";
import type * as NativeModule from "../../native/index.d.ts";

export type Native = typeof NativeModule;

let loaded: Native | undefined;
let reference: ReferenceKernels | undefined;

/** The addon's exports that compute a cell's reference from the generator alone (SPEC §6). */
export const REFERENCE_EXPORTS = ["exactFull", "maxAbsFull", "benchExactFullLibm"] as const;

export type ReferenceKernels = Pick<Native, "exactFull" | "maxAbsFull">;

export function native(): Native {
  if (loaded) return loaded;
  const require = createRequire(import.meta.url);
  try {
    loaded = require("../../native/index.cjs") as Native;
    // kept here, so that a worker can take them off the addon's exports (sealAddon) and still judge
    reference = { exactFull: loaded.exactFull, maxAbsFull: loaded.maxAbsFull };
  } catch (err) {
    throw new ClipParityError(
      "E_NATIVE",
      `the native addon could not be loaded (${(err as Error).message.split("\n")[0]}); ` +
        "build it with `npm run build:native` (npm ci does this)",
    );
  }
  return loaded;
}

/**
 * The reference's kernels, for gradients/reference.ts alone: a subject module may not import this module
 * or that one (subject/loader-hooks.mjs), and a worker removes them from the addon's exports before any
 * subject code runs (sandbox/seal.ts sealAddon), so no subject can recompute its cell's reference.
 */
export function referenceKernels(): ReferenceKernels {
  native();
  return reference!;
}

/**
 * The one place that loads the native addon (native/index.cjs, built by `npm ci`).
 * A missing build is bad input to the harness, not a crash: it says how to build it.
 */
import { createRequire } from "node:module";
import { ClipParityError } from "../errors.ts";
import type * as NativeModule from "../../native/index.d.ts";

export type Native = typeof NativeModule;

let loaded: Native | undefined;

export function native(): Native {
  if (loaded) return loaded;
  const require = createRequire(import.meta.url);
  try {
    loaded = require("../../native/index.cjs") as Native;
  } catch (err) {
    throw new ClipParityError(
      "E_NATIVE",
      `the native addon could not be loaded (${(err as Error).message.split("\n")[0]}); ` +
        "build it with `npm run build:native` (npm ci does this)",
    );
  }
  return loaded;
}

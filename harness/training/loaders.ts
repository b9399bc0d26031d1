/** Checkpoint loaders by name: the correct one, and the known-bad ones the resume suite must catch. */
import { InputError } from "../errors.ts";
import { correctLoader, type CheckpointLoader } from "./checkpoint.ts";
import dropStep from "./known-bad/drop-step.ts";
import dropTied from "./known-bad/drop-tied.ts";

export const LOADERS: Readonly<Record<string, CheckpointLoader>> = Object.freeze({
  [correctLoader.name]: correctLoader,
  [dropStep.name]: dropStep,
  [dropTied.name]: dropTied,
});

export const LOADER_NAMES: readonly string[] = Object.keys(LOADERS);

export function loaderNamed(name: string, field = "loader"): CheckpointLoader {
  const l = Object.hasOwn(LOADERS, name) ? LOADERS[name] : undefined;
  if (!l) throw new InputError(`${field}: "${name}" is not one of ${LOADER_NAMES.join(", ")}`);
  return l;
}

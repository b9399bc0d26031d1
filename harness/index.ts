/**
 * clip-parity's public entry (`import ... from "clip-parity"`): what a subject module and a library
 * caller need, and nothing of the harness's inside, so that files can move behind it without breaking
 * anyone. A subject module needs the subject API (defineSubject and the types its clip sees, the float32
 * helpers torch's clip computes with); a library caller needs runMatrix, a layout parser and the result
 * types. Anything else is internal: the loader still resolves `clip-parity/<path>` inside a subject
 * module, but such a path may move in any release.
 */
export {
  clipCoefficient,
  defineSubject,
  NonFiniteNormError,
  normFromPowerSum,
  type ClipArgs,
  type CollectiveKind,
  type CommRecord,
  type DType,
  type Exact,
  type ExternalCell,
  type ExternalRun,
  type InitArgs,
  type Ops,
  type ParamView,
  type RankContext,
  type ReduceOp,
  type Subject,
  type SubjectShape,
  type Tensor,
  type TensorFiles,
  type ToleranceClass,
} from "./subject/api.ts";
export { combineHooks, runMatrix, type RunHooks, type RunMatrixOptions, type RunOutput, type RunStartInfo } from "./run/runner.ts";
export { runVerdict, type RunVerdict } from "./run/verdict.ts";
export { runCell, type RunCellOptions } from "./execute/cell.ts";
export { formatLayout, parseLayout, validateLayout, worldSize, type Layout, type ValidLayout } from "./layout/layout.ts";
export { DTYPES, cellId, type Case, type Cell, type Matrix } from "./cell/cell.ts";
export type { CellResult, CheckResult, CheckStatus, RunSummary } from "./results/types.ts";
export { CHECKS, RUN_CHECKS } from "./checks/index.ts";
export { MODEL_NAMES, getModel } from "./model/models.ts";
export { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS } from "./registry/registry.ts";
export { REGIMES, type Regime } from "./gradients/regimes.ts";
export { ClipParityError, InputError, LayoutError, ModelError } from "./errors.ts";

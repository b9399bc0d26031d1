/**
 * The flags that name one cell without its subject (`cell`, `export`, `bisect`): declared once, parsed once, so the
 * commands agree on their names, values and messages.
 */
import { InputError } from "../harness/errors.ts";
import { ALL_REGIMES, type Regime } from "../harness/gradients/regimes.ts";
import { parseLayout } from "../harness/layout/layout.ts";
import { getModel } from "../harness/model/models.ts";
import { DTYPES, type Case } from "../harness/cell/cell.ts";
import { parseBoolean, parseChoice, parseInteger, parseNormType, parsePositiveReal, str, type FlagSpec, type Values } from "./args.ts";

/** The five that every cell needs. */
export const REQUIRED_CELL_FLAGS = ["layout", "model", "dtype", "norm", "regime"] as const;
/** Every cell flag, the five first. */
export const CELL_FLAG_NAMES = [...REQUIRED_CELL_FLAGS, "seed", "max-norm", "error-if-nonfinite"] as const;

/** Their declarations; `requiredUnless` marks the five as required unless one of those flags is given. */
export function cellFlagSpecs(requiredUnless?: readonly string[]): Record<(typeof CELL_FLAG_NAMES)[number], FlagSpec> {
  const req = requiredUnless ? { requiredUnless } : {};
  return {
    layout: { type: "string", value: "SPEC", description: "e.g. pp2,dp_shard2,ep2 (axes left out are 1; single = all ones)", ...req },
    model: { type: "string", value: "NAME", description: "clip-parity list models", ...req },
    dtype: { type: "string", value: DTYPES.join("|"), description: "gradient dtype", ...req },
    norm: { type: "string", value: "2|1|inf|P", description: "the p of the p-norm", ...req },
    regime: { type: "string", value: "NAME", description: "clip-parity list regimes", ...req },
    seed: { type: "string", value: "N", description: "generator seed", default: "0" },
    "max-norm": { type: "string", value: "X", description: "override the regime's max_norm" },
    "error-if-nonfinite": { type: "string", value: "true|false", description: "override the regime's default" },
  };
}

/** The case the flags name; InputError naming the missing flags (`orElse`: what may be given instead). */
export function caseFromFlags(v: Values, command: string, orElse?: string): Case {
  const missing = REQUIRED_CELL_FLAGS.filter((f) => str(v, f) === undefined);
  if (missing.length) throw new InputError(`${command}: --${missing.join(", --")} required${orElse ? ` (or ${orElse})` : ""}`);
  const s = (f: string) => str(v, f)!;
  getModel(s("model"));
  const maxNorm = str(v, "max-norm");
  const errorIfNonfinite = str(v, "error-if-nonfinite");
  return {
    layout: parseLayout(s("layout")),
    model: s("model"),
    dtype: parseChoice(s("dtype"), "--dtype", DTYPES),
    normType: parseNormType(s("norm")),
    regime: parseChoice(s("regime"), "--regime", ALL_REGIMES) as Regime,
    seed: parseInteger(s("seed"), "--seed"),
    ...(maxNorm !== undefined ? { maxNorm: parsePositiveReal(maxNorm, "--max-norm") } : {}),
    ...(errorIfNonfinite !== undefined ? { errorIfNonfinite: parseBoolean(errorIfNonfinite, "--error-if-nonfinite") } : {}),
  };
}

/**
 * Regimes (SPEC §5): which logical parameters have a gradient, the gradient scale exponent `e`,
 * special values, and how max_norm is chosen relative to the norm.
 */
import { InputError } from "../errors.ts";

/** The regimes every matrix sweep rotates through (their order is the sweep's: keep it). */
export const REGIMES = [
  "active",
  "inactive",
  "boundary",
  "sparse",
  "zeros",
  "ones",
  "nonfinite-inf",
  "nonfinite-nan",
  "empty",
] as const;
/**
 * Regimes outside the sweep's rotation, run by their own matrix sections: `finalize` (SPEC §5: each
 * physical copy of a tied parameter gets its own partial gradient; the logical gradient is their sum).
 */
export const EXTRA_REGIMES = ["finalize"] as const;
/** Every regime a cell, a matrix file or a command line may name. */
export const ALL_REGIMES = [...REGIMES, ...EXTRA_REGIMES] as const;
export type Regime = (typeof ALL_REGIMES)[number];

export interface RegimeSpec {
  /** Gradient scale exponent e: |value| < 2^e. */
  exp: number;
  mode: "gen" | "ones" | "zeros";
  /** Whether the logical parameter at this manifest index has a gradient. */
  hasGrad(index: number): boolean;
  /** Element 0 of the first logical parameter with a gradient is replaced by this value. */
  special: number | null;
  /** max_norm, or "boundary": one float32 ulp below the reference norm, so clip_coef is just under 1. */
  maxNorm: number | "boundary";
  /** Default of error_if_nonfinite for cells of this regime. */
  errorIfNonfinite: boolean;
  /**
   * finalize: the exponent e of each physical copy's partial gradient of a tied parameter (whose
   * logical gradient is the copies' sum); undefined in every other regime.
   */
  tiedExp?: number;
}

const all = () => true;

const SPECS: Record<Regime, RegimeSpec> = {
  // e = 0 puts every debug model's 2-norm in the hundreds to thousands: far above max_norm 1.
  active: { exp: 0, mode: "gen", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  // e = -20 puts the norm near 1e-3: far below max_norm 1, so clip_coef clamps to 1.
  inactive: { exp: -20, mode: "gen", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  boundary: { exp: 0, mode: "gen", hasGrad: all, special: null, maxNorm: "boundary", errorIfNonfinite: false },
  sparse: { exp: 0, mode: "gen", hasGrad: (i) => i % 3 !== 1, special: null, maxNorm: 1, errorIfNonfinite: false },
  zeros: { exp: 0, mode: "zeros", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  ones: { exp: 0, mode: "ones", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  "nonfinite-inf": { exp: 0, mode: "gen", hasGrad: all, special: Infinity, maxNorm: 1, errorIfNonfinite: true },
  "nonfinite-nan": { exp: 0, mode: "gen", hasGrad: all, special: NaN, maxNorm: 1, errorIfNonfinite: true },
  empty: { exp: 0, mode: "gen", hasGrad: () => false, special: null, maxNorm: 1, errorIfNonfinite: false },
  // untied params as in `active`; tied copies' partials at e = -1, so that two of them add exactly
  finalize: { exp: 0, mode: "gen", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false, tiedExp: -1 },
};

export function regimeSpec(regime: string): RegimeSpec {
  if (!Object.hasOwn(SPECS, regime)) throw new InputError(`regime: "${regime}" is not one of ${ALL_REGIMES.join(", ")}`);
  return SPECS[regime as Regime];
}

/** The float32 one ulp below a positive finite float32 `x` (x itself when x is 0 or not finite). */
export function f32Below(x: number): number {
  if (!Number.isFinite(x) || x <= 0) return x;
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  u[0] -= 1;
  return f[0];
}

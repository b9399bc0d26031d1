/**
 * Regimes (SPEC §5): which logical parameters have a gradient, the gradient scale exponent `e`,
 * special values, and how max_norm is chosen relative to the norm.
 */
import { deepFreeze } from "../util/freeze.ts";
import { InputError } from "../errors.ts";
import { formatLayout, type Layout } from "../layout/layout.ts";

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
 * physical copy of a tied parameter gets its own partial gradient; the logical gradient is their sum),
 * `nonfinite-neginf` (element 0 of the first parameter with a gradient is -Inf: a norm that takes a
 * signed max, or a non-finite test written as `x === Infinity` on a signed value, shows there),
 * `boundary-small` (the `inactive` regime's small gradients, e = -20, with max_norm placed as in `boundary`:
 * torch's `+ 1e-6` still makes clip_coef < 1 when max_norm lies on the norm or just above it, so a
 * `norm > max_norm` guard written in place of the clamp shows; on a large norm the `+ 1e-6` vanishes),
 * `tiny` (SPEC §5: e = -40 and max_norm = 2^-40, float32 and bfloat16 only: the norm lies far below the
 * 1e-6 the clip coefficient adds to it, so the coefficient depends on where that 1e-6 is added; a subject
 * that adds it to each rank's partial norm before a sum reduction scales by another one).
 */
export const EXTRA_REGIMES = ["finalize", "nonfinite-neginf", "boundary-small", "tiny"] as const;
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
  /**
   * max_norm, or "boundary": the reference norm moved a few float32 ulps down, not at all, or up
   * (boundaryOffset), so that max_norm does not tell a subject where the norm is.
   */
  maxNorm: number | "boundary";
  /** Default of error_if_nonfinite for cells of this regime. */
  errorIfNonfinite: boolean;
  /**
   * finalize: the exponent e of each physical copy's partial gradient of a tied parameter (whose
   * logical gradient is the copies' sum); undefined in every other regime.
   */
  tiedExp?: number;
  /**
   * The gradient dtypes the regime can run in, and why not the others; every dtype when absent. A cell
   * in another dtype is refused (regimeSpec with its dtype) before anything runs.
   */
  dtypes?: { only: readonly string[]; why: string };
}

const all = () => true;

// frozen: shared by every cell of the thread (a subject that sets a mode would change the cells after it)
const SPECS: Record<Regime, RegimeSpec> = deepFreeze({
  // e = 0 puts every debug model's 2-norm in the hundreds to thousands: far above max_norm 1.
  active: { exp: 0, mode: "gen", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  // e = -20 puts the norm near 1e-3: far below max_norm 1, so clip_coef clamps to 1.
  inactive: { exp: -20, mode: "gen", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  boundary: { exp: 0, mode: "gen", hasGrad: all, special: null, maxNorm: "boundary", errorIfNonfinite: false },
  "boundary-small": { exp: -20, mode: "gen", hasGrad: all, special: null, maxNorm: "boundary", errorIfNonfinite: false },
  sparse: { exp: 0, mode: "gen", hasGrad: (i) => i % 3 !== 1, special: null, maxNorm: 1, errorIfNonfinite: false },
  zeros: { exp: 0, mode: "zeros", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  ones: { exp: 0, mode: "ones", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false },
  "nonfinite-inf": { exp: 0, mode: "gen", hasGrad: all, special: Infinity, maxNorm: 1, errorIfNonfinite: true },
  "nonfinite-nan": { exp: 0, mode: "gen", hasGrad: all, special: NaN, maxNorm: 1, errorIfNonfinite: true },
  "nonfinite-neginf": { exp: 0, mode: "gen", hasGrad: all, special: -Infinity, maxNorm: 1, errorIfNonfinite: true },
  empty: { exp: 0, mode: "gen", hasGrad: () => false, special: null, maxNorm: 1, errorIfNonfinite: false },
  // e = -40: the 2-norm of a debug model near 1e-9, far below the clip's 1e-6, and max_norm 2^-40 below
  // every norm (clip_coef about 1e-6): where the 1e-6 is added decides the coefficient. Float16 holds
  // neither: its smallest subnormal is 2^-24, so every gradient and max_norm would round to 0.
  tiny: {
    exp: -40,
    mode: "gen",
    hasGrad: all,
    special: null,
    maxNorm: 2 ** -40,
    errorIfNonfinite: false,
    dtypes: { only: ["f32", "bf16"], why: "its gradients (|g| < 2^-40) and max_norm (2^-40) lie below float16's smallest subnormal, 2^-24, and would all round to 0" },
  },
  // untied params as in `active`; tied copies' partials at e = -1, so that two of them add exactly
  finalize: { exp: 0, mode: "gen", hasGrad: all, special: null, maxNorm: 1, errorIfNonfinite: false, tiedExp: -1 },
});

/**
 * A regime's spec; with `dtype`, also refused (InputError naming the regime, the dtype and why) when the
 * regime cannot run in that dtype (`tiny` in f16).
 */
export function regimeSpec(regime: string, dtype?: string): RegimeSpec {
  if (!Object.hasOwn(SPECS, regime)) throw new InputError(`regime: "${regime}" is not one of ${ALL_REGIMES.join(", ")}`);
  const spec = SPECS[regime as Regime];
  if (dtype !== undefined && spec.dtypes && !spec.dtypes.only.includes(dtype)) {
    throw new InputError(`regime "${regime}" cannot run in ${dtype}: ${spec.dtypes.why} (it runs in ${spec.dtypes.only.join(" and ")} only)`);
  }
  return spec;
}

/**
 * How far, in float32 ulps, the boundary regime moves max_norm from the norm: below, on and above it.
 * The outer offsets lie outside the fp32 class's band (4 * 2^-24 relative: 2 to 4 ulps), so a subject
 * that answers from max_norm instead of computing the norm fails the cells that draw them.
 */
export const BOUNDARY_OFFSETS = [-8, -2, -1, 0, 1, 2, 8] as const;

/** What max_norm depends on: a cell, a training step's clip, an agreement or export case. */
export interface MaxNormCase {
  regime: string;
  /** Given explicitly (a matrix case, --max-norm): taken as it is. */
  maxNorm?: number;
  seed: number;
  model: string;
  dtype: string;
  normType: number;
  step?: number;
  /**
   * The cell's layout, when max_norm may differ between layouts (cells: spreads the offsets over a
   * matrix that sweeps layouts at one seed); absent where layouts are compared (training parity).
   */
  layout?: Layout;
}

/**
 * The boundary's offset in float32 ulps, one of BOUNDARY_OFFSETS: drawn from the seed, what the
 * reference depends on and the layout when given (every subject of one cell gets the same max_norm).
 * Below, on and above the norm all occur, so a subject that answers from max_norm (`nextUp(maxNorm)`)
 * fails the boundary cells that draw an outer offset.
 */
export function boundaryOffset(c: MaxNormCase): number {
  let h = 0x811c9dc5;
  const layout = c.layout ? formatLayout(c.layout) : "";
  for (const ch of `${c.seed}|${c.model}|${c.dtype}|${c.normType}|${c.step ?? 0}|${layout}`) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193);
  // murmur3's finalizer: FNV's low bits alone barely move between keys that differ in one character
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  h = (h ^ (h >>> 16)) >>> 0;
  return BOUNDARY_OFFSETS[h % BOUNDARY_OFFSETS.length]!;
}

/** The max_norm of a case whose reference norm is `referenceNorm`: the one rule every caller uses. */
export function maxNormOf(c: MaxNormCase, referenceNorm: number): number {
  if (c.maxNorm !== undefined) return c.maxNorm;
  const spec = regimeSpec(c.regime);
  return spec.maxNorm === "boundary" ? f32Ulps(referenceNorm, boundaryOffset(c)) : spec.maxNorm;
}

/** The float32 `k` ulps above (k > 0) or below a positive finite float32 `x` (x itself when 0 or not finite). */
export function f32Ulps(x: number, k: number): number {
  if (!Number.isFinite(x) || x <= 0) return x;
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  u[0] += k;
  return f[0]!;
}

/** Float32 ulps from `from` to `to` (the inverse of f32Ulps), when both are positive finite float32 values; null otherwise. */
export function f32UlpsBetween(from: number, to: number): number | null {
  if (!(from > 0 && to > 0 && Number.isFinite(from) && Number.isFinite(to)) || Math.fround(from) !== from || Math.fround(to) !== to) return null;
  const bits = new Int32Array(new Float32Array([from, to]).buffer);
  return bits[1]! - bits[0]!;
}

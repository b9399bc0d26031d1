/**
 * fast-check arbitraries for fuzz cases (case.ts).
 *
 * Every case is drawn as layout-independent "raw" numbers and then mapped onto the drawn layout
 * (stage = raw % pp, sub-mesh = a bit mask over the stage mesh's axes, placement code 0 = Replicate,
 * k = Shard((k-1) % ndim) or Partial (placementFromCode), ep = a divisor of dp_shard*cp*tp picked by index). fast-check shrinks the
 * raw numbers toward 0, so a counterexample shrinks toward: one rank per axis, stage 0, the whole
 * stage mesh, Replicate everywhere, shape [1], no replicas, the first dtype / norm / regime, seed 0.
 *
 * What is covered (harness/fuzz/coverage.ts counts them; suites/fuzz/case.test.ts asserts each in >= 5% of cases):
 * - layouts of world size 1 to 16 on all six axes, ep any divisor of dp_shard*cp*tp;
 * - per copy: the dense or the sparse stage mesh or any sub-mesh of it (1 to 4 axes), each axis
 *   Replicate or Shard(d) on any dim, or Partial(sum) (untied tensors of 1 or 2 dims), several axes
 *   sharding one dim (outer axis first, torch.chunk),
 *   dims of 1 to 7 elements so uneven and empty chunks are common;
 * - parameters on different meshes in one model; PP stages picked per parameter, so stages without
 *   expert (sparse) parameters, stages with nothing at all and stages holding only a tied replica
 *   occur; tie groups with replicas on other stages, each replica with its own mesh and placements;
 * - dtypes f32, bf16, f16; norm types 2, 1, inf and 1.5; every regime, error_if_nonfinite default or
 *   false; gradient seeds 0..999;
 * - for an optimizer-owned subject: tied parameters as trainers tie them (a replica on the last stage,
 *   placed like its canonical copy) and the finalize regime (see CaseArbOptions.shape).
 * Tensors stay small (at most 7^3 = 343 elements, at most 6 logical params) so hundreds of cases
 * run in seconds.
 *
 * An optimizer-owned subject (shape "optimizer": it finalizes tied gradients and syncs tied copies
 * itself) gets its own cases (optimizerCaseArb): parameters tied as case.ts checkOptimizerCase
 * requires (trainerParamFromRaw), the `finalize` regime among the regimes (each copy its own partial
 * gradient), two tied parameters over one set of ranks whenever two canonical copies draw the same
 * stage and placements, and training cases of 2 or 3 steps (`steps`, about half the cases, finite
 * regimes): an init sync from the wrong copy, or state that is right at step 1 and wrong from step 2.
 * The clip subjects' cases are drawn exactly as before, so their seeds find the same cases.
 */
import fc from "fast-check";
import type { DType } from "../subject/api.ts";
import { REGIMES, type Regime } from "../gradients/regimes.ts";
import type { Layout } from "../layout/layout.ts";
import type { MeshName } from "../layout/mesh.ts";
import { Partial, Replicate, Shard, type Placement } from "../model/plan.ts";
import { STAGE_MESH_AXES, type FuzzCase, type FuzzCopy, type FuzzParam } from "./case.ts";

export const MAX_WORLD = 16;
export const MAX_PARAMS = 6;
export const MAX_DIM = 7;
export const FUZZ_DTYPES: readonly DType[] = ["f32", "bf16", "f16"];
export const FUZZ_NORMS: readonly number[] = [2, 1, Infinity, 1.5];

/** Axis sizes by index: shrinking the index shrinks the size; small sizes are drawn most often. */
const SIZES = [1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 5, 6, 8];

function divisors(n: number): number[] {
  const out: number[] = [];
  for (let d = 1; d <= n; d++) if (n % d === 0) out.push(d);
  return out;
}

/** World-size caps by index: spreads worlds over 1..16 instead of piling them up at 12-16. */
const CAPS = [1, 2, 2, 3, 4, 4, 5, 6, 8, 8, 9, 12, 16, 16, 16];

interface RawLayout {
  /** index into CAPS: the largest world this layout may have */
  cap: number;
  sizes: number[]; // pp, dp_replicate, dp_shard, cp, tp (indices into SIZES)
  ep: number;
}

/** Sizes from SIZES, then the largest axis decremented until the world fits in its cap (<= MAX_WORLD). */
export function layoutFromRaw(raw: RawLayout): Layout {
  const s = raw.sizes.map((i) => SIZES[i % SIZES.length]!);
  const cap = Math.min(MAX_WORLD, CAPS[raw.cap % CAPS.length]!);
  for (;;) {
    const world = s.reduce((a, b) => a * b, 1);
    if (world <= cap) break;
    let big = 0;
    for (let i = 1; i < s.length; i++) if (s[i]! >= s[big]!) big = i;
    s[big]!--;
  }
  const [pp, dp_replicate, dp_shard, cp, tp] = s as [number, number, number, number, number];
  const ds = divisors(dp_shard * cp * tp);
  return { pp, dp_replicate, dp_shard, cp, tp, ep: ds[raw.ep % ds.length]! };
}

const rawLayout: fc.Arbitrary<RawLayout> = fc.record({
  cap: fc.nat(CAPS.length - 1),
  sizes: fc.array(fc.nat(SIZES.length - 1), { minLength: 5, maxLength: 5 }),
  ep: fc.nat(15),
});

export const layoutArb: fc.Arbitrary<Layout> = rawLayout.map(layoutFromRaw);

interface RawCopy {
  stage: number;
  sparse: boolean;
  /** 0 or >= 16: the whole stage mesh; else a bit mask of its axes (a mask selecting none = the whole mesh). */
  axesMask: number;
  /** Per selected axis: 0 Replicate, k Shard((k-1) % ndim). */
  placements: number[];
}

interface RawParam extends RawCopy {
  shape: number[];
  replicas: RawCopy[];
}

const rawCopy: fc.Arbitrary<RawCopy> = fc.record({
  stage: fc.nat(15),
  sparse: fc.boolean(),
  axesMask: fc.nat(31),
  placements: fc.array(fc.nat(3), { minLength: 4, maxLength: 4 }),
});

const rawParam: fc.Arbitrary<RawParam> = fc.record({
  shape: fc.array(fc.integer({ min: 1, max: MAX_DIM }), { minLength: 1, maxLength: 3 }),
  stage: fc.nat(15),
  sparse: fc.boolean(),
  axesMask: fc.nat(31),
  placements: fc.array(fc.nat(3), { minLength: 4, maxLength: 4 }),
  replicas: fc.array(rawCopy, { maxLength: 2 }),
});

/**
 * Placement code 0 Replicate, k Shard((k-1) % ndim); on an untied tensor of fewer than 3 dims (where
 * code 3 would repeat an earlier Shard) code 3 is Partial(sum): one axis in four of such a copy.
 */
function placementFromCode(code: number, ndim: number, allowPartial: boolean): Placement {
  if (code === 0) return Replicate;
  return code === 3 && ndim < 3 && allowPartial ? Partial : Shard((code - 1) % ndim);
}

function copyFromRaw(raw: RawCopy, ndim: number, pp: number, allowPartial = false): FuzzCopy {
  const mesh: MeshName = raw.sparse ? "sparse" : "dense";
  const all = STAGE_MESH_AXES[mesh];
  let axes = raw.axesMask >= 16 ? [] : all.filter((_, i) => raw.axesMask & (1 << i));
  if (axes.length === 0) axes = all.slice();
  const placements: Placement[] = axes.map((_, i) => placementFromCode(raw.placements[i] ?? 0, ndim, allowPartial));
  return { stage: raw.stage % pp, mesh, axes, placements };
}

/**
 * An optimizer-owned subject's parameter: tied (when there is a replica to draw and more than one stage)
 * as trainers tie them, a canonical copy on an earlier stage and one replica on the last stage placed
 * like it (torchtitan's MTP embedding, a tied output layer).
 */
function trainerParamFromRaw(raw: RawParam, index: number, pp: number): FuzzParam {
  const ndim = raw.shape.length;
  if (pp === 1 || raw.replicas.length === 0) return { name: `p${index}`, shape: raw.shape.slice(), ...copyFromRaw(raw, ndim, pp), replicas: [] };
  const canonical = copyFromRaw({ ...raw, stage: raw.stage % (pp - 1) }, ndim, pp);
  return { name: `p${index}`, shape: raw.shape.slice(), ...canonical, replicas: [{ ...canonical, stage: pp - 1 }] };
}

function paramFromRaw(raw: RawParam, index: number, pp: number): FuzzParam {
  const ndim = raw.shape.length;
  const stages = new Set([raw.stage % pp]);
  const replicas: FuzzCopy[] = [];
  for (const r of raw.replicas) {
    const copy = copyFromRaw(r, ndim, pp);
    if (stages.has(copy.stage)) continue; // same stage = the same tensor; not a separate copy
    stages.add(copy.stage);
    replicas.push(copy);
  }
  // only an untied parameter's gradient may be Partial (tied copies hold the finalize regime's partials)
  const canonical = copyFromRaw(raw, ndim, pp, replicas.length === 0);
  return { name: `p${index}`, shape: raw.shape.slice(), ...canonical, replicas };
}

export interface CaseArbOptions {
  /** The subject every case names. */
  subject: string;
  /**
   * The subject's shape. An optimizer-owned clipper finalizes and syncs tied copies elementwise over
   * their tie group, as trainers do with copies sharded alike (torchtitan's MTP embedding, a tied output
   * on the last stage): its cases tie parameters that way (trainerParamFromRaw) and add the `finalize`
   * regime, in which each copy holds its own partial gradient.
   */
  shape?: "clip" | "optimizer";
}

/**
 * What every case draws, whatever the subject's shape, in this order: fast-check draws a record's keys
 * in order, so the order is what keeps a seed finding the same cases.
 */
const drawsWith = (regimes: readonly Regime[]) => ({
  layout: rawLayout,
  params: fc.array(rawParam, { minLength: 1, maxLength: MAX_PARAMS }),
  dtype: fc.constantFrom(...FUZZ_DTYPES),
  normType: fc.constantFrom(...FUZZ_NORMS),
  regime: fc.constantFrom<Regime>(...regimes),
  seed: fc.nat(999),
  noError: fc.boolean(),
});

/** Fuzz cases for one subject. */
export function caseArb(options: CaseArbOptions): fc.Arbitrary<FuzzCase> {
  if (options.shape === "optimizer") return optimizerCaseArb(options.subject);
  return fc
    .record(drawsWith(REGIMES))
    .map((raw) => {
      const layout = layoutFromRaw(raw.layout);
      const c: FuzzCase = {
        subject: options.subject,
        layout,
        dtype: raw.dtype,
        normType: raw.normType,
        regime: raw.regime,
        seed: raw.seed,
        params: raw.params.map((p, i) => paramFromRaw(p, i, layout.pp)),
      };
      // error_if_nonfinite=False on a non-finite regime: NaN/Inf propagate through the scaling.
      if (raw.noError && raw.regime.startsWith("nonfinite")) c.errorIfNonfinite = false;
      return c;
    });
}

// ---- optimizer-owned subjects ----------------------------------------------------------------

/** Regimes of training cases: finite gradients (the loop never raises; a NaN would only end the comparison). */
export const TRAIN_REGIMES: readonly Regime[] = ["active", "inactive", "boundary", "sparse", "zeros"];
/** Steps of a case: 0 a clip case; 2 or 3 a training case (step 2 is where state kept from step 1 shows). */
const STEPS = [0, 2, 0, 3];

/** Fuzz cases for an optimizer-owned subject (see the module comment). */
export function optimizerCaseArb(subject: string): fc.Arbitrary<FuzzCase> {
  return fc
    .record({
      ...drawsWith([...REGIMES, "finalize"]),
      // a quarter of the clip cases in `finalize`, where a tied copy's own partial makes the finalize matter
      finalize: fc.nat(3),
      trainRegime: fc.constantFrom(...TRAIN_REGIMES),
      steps: fc.constantFrom(...STEPS),
    })
    .map((raw) => {
      const layout = layoutFromRaw(raw.layout);
      const regime: Regime = raw.steps ? raw.trainRegime : raw.finalize === 0 ? "finalize" : raw.regime;
      const params = raw.params.map((p, i) => trainerParamFromRaw(p, i, layout.pp));
      const c: FuzzCase = { subject, layout, dtype: raw.dtype, normType: raw.normType, regime, seed: raw.seed, params };
      if (raw.steps) c.steps = raw.steps;
      else if (raw.noError && regime.startsWith("nonfinite")) c.errorIfNonfinite = false;
      return c;
    });
}

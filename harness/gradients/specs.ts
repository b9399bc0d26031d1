/**
 * Gradient generator specs per regime and subject shape (SPEC §5), the `finalize` regime included.
 *
 * - `logical(p)`: the LOGICAL gradient of a logical parameter: what the reference is taken over and
 *   what every physical copy must hold, clipped, after a correct clip. In `finalize` a tied
 *   parameter's logical gradient is the float32 sum of its manifest copies' partials (canonical
 *   first, then the replicas: ascending stage order), each generated under the copy's physical FQN
 *   with e = tiedExp (-1), rounded once to the dtype (GenSpec.sumOf).
 * - `input(lp)`: what the harness puts into one physical copy before the clip.
 *   - A plain clip subject (shape "clip") gets the harness-finalized gradient: every copy already
 *     holds the logical gradient (in every regime, as before this regime existed).
 *   - An optimizer-owned clipper (shape "optimizer") gets the raw partials and finalizes them itself:
 *     in `finalize` each physical tensor holds the f32 sum of the manifest copies it holds (with
 *     pp = 1 the replica and its canonical copy are one tensor: both partials, i.e. the logical
 *     gradient); in every other regime the canonical copy holds the whole logical gradient and a
 *     split replica a zero partial, so that the finalize sum is the logical gradient again.
 *
 * Partial(sum) gradients (a LogicalParam with `partialOver`; never tied), in every regime:
 * - with mode `gen` the logical gradient is the float32 sum of two partials, each generated under
 *   `<name>#partial0` / `<name>#partial1` with e - 1, rounded once to the dtype (the finalize rule).
 *   Two partials add exactly in float32 (their sum fits float32's significand), so the sum is the
 *   same in any order and on any number of ranks: the reference does not depend on the layout;
 * - the copy whose partial index (row-major over its Partial axes) is 0 holds partial0 (with the
 *   regime's special value, which the sum keeps), index 1 holds partial1, every other index -0 (which adds nothing, not even to a -0);
 *   a copy whose Partial axes have one rank in all holds the logical gradient;
 * - with modes `ones` and `zeros` index 0 holds the logical gradient and every other index -0.
 */
import type { DType, SubjectShape } from "../subject/api.ts";
import type { GenSpec } from "../backend/backend.ts";
import type { ModelManifest } from "../model/manifest.ts";
import type { PartialSlot } from "../model/plan.ts";
import { regimeSpec } from "./regimes.ts";

/** What identifies one physical copy to the generator. */
export type CopyRef = { fqn: string; name: string; index: number; canonical: boolean; stage: number; partial?: PartialSlot };

export interface GradSpecs {
  /** The logical gradient of a logical parameter (canonical name and manifest index). */
  logical(p: { name: string; index: number }): GenSpec;
  /**
   * What one physical copy holds once gradients are complete, and must hold scaled after a correct
   * clip: the logical gradient, or for a Partial(sum) copy its own partial (partialSpec).
   */
  held(lp: CopyRef): GenSpec;
  /** What one physical copy is filled with before the clip (see the module comment). */
  input(lp: CopyRef): GenSpec;
}

/** The generator names of a Partial(sum) gradient's two partials. */
export function partialNames(name: string): [string, string] {
  return [`${name}#partial0`, `${name}#partial1`];
}

/** The logical gradient of a Partial(sum) parameter, from `plain` (its spec as an ordinary gradient). */
function partialLogical(plain: GenSpec): GenSpec {
  return plain.mode === "gen" ? { ...plain, exp: plain.exp - 1, sumOf: partialNames(plain.name) } : plain;
}

/** The partial one copy of a Partial(sum) parameter holds (see the module comment). */
function partialSpec(plain: GenSpec, slot: PartialSlot): GenSpec {
  if (slot.count === 1) return partialLogical(plain);
  // -0, not +0: x + -0 is x for every x, -0 included, so the extra ranks leave the partials' sum bitwise as it is
  const zeros: GenSpec = { seed: plain.seed, step: plain.step, name: plain.name, dtype: plain.dtype, exp: plain.exp, mode: "neg-zeros" };
  if (plain.mode !== "gen") return slot.index === 0 ? plain : zeros;
  const [first, second] = partialNames(plain.name);
  if (slot.index === 0) return { ...plain, name: first, exp: plain.exp - 1 };
  if (slot.index === 1) return { ...zeros, name: second, exp: plain.exp - 1, mode: "gen" };
  return zeros;
}

/** The manifest copies of a tied parameter in ascending stage order (canonical first); [] when untied. */
export function tieCopies(model: ModelManifest, name: string): string[] {
  const t = model.ties.find((g) => g.canonical === name);
  return t ? [t.canonical, ...t.replicas.map((r) => r.fqn)] : [];
}

/**
 * The manifest copies one physical tensor holds: a split replica holds itself; a canonical copy
 * holds itself and every replica placed on its own stage (replicas sit on the last stage: all of
 * them when pp = 1).
 */
export function heldCopies(model: ModelManifest, pp: number, lp: { fqn: string; name: string; canonical: boolean; stage: number }): string[] {
  const copies = tieCopies(model, lp.name);
  if (copies.length === 0) return [lp.fqn];
  if (!lp.canonical) return [lp.fqn];
  return lp.stage === pp - 1 ? copies : [lp.name];
}

export function gradSpecs(
  model: ModelManifest,
  cfg: { dtype: DType; regime: string; seed: number | bigint; step: number; pp: number; shape?: SubjectShape },
): GradSpecs {
  const regime = regimeSpec(cfg.regime, cfg.dtype);
  // the non-finite regimes put their special value at element 0 of the first parameter with a gradient
  const specialParam = regime.special === null ? undefined : model.params.find((p) => regime.hasGrad(p.index));
  const seed = BigInt(cfg.seed);
  const base = (p: { name: string; index: number }): GenSpec => {
    const g: GenSpec = { seed, step: cfg.step, name: p.name, dtype: cfg.dtype, exp: regime.exp, mode: regime.mode };
    if (p.index === specialParam?.index) {
      g.specialIndex = 0;
      g.specialValue = regime.special!;
    }
    return g;
  };
  const tied = new Map(model.ties.map((t) => [t.canonical, tieCopies(model, t.canonical)]));
  const partial = new Set(model.params.filter((p) => p.partialOver?.length).map((p) => p.name));
  const logical = (p: { name: string; index: number }): GenSpec => {
    if (partial.has(p.name)) return partialLogical(base(p));
    const copies = tied.get(p.name);
    if (regime.tiedExp === undefined || !copies) return base(p);
    return { ...base(p), exp: regime.tiedExp, sumOf: copies };
  };
  const held: GradSpecs["held"] = (lp) => (lp.partial && partial.has(lp.name) ? partialSpec(base(lp), lp.partial) : logical(lp));
  const input: GradSpecs["input"] = (lp) => {
    if (cfg.shape !== "optimizer" || !tied.has(lp.name)) return held(lp);
    if (regime.tiedExp !== undefined) {
      return { ...base(lp), name: lp.fqn, exp: regime.tiedExp, sumOf: heldCopies(model, cfg.pp, lp) };
    }
    if (lp.canonical) return logical(lp);
    // a split replica outside finalize: a zero partial (the canonical copy holds the whole gradient), -0 so
    // that the finalize sum is the canonical gradient bitwise, a -0 element included (-0 + +0 is +0)
    return { seed, step: cfg.step, name: lp.fqn, dtype: cfg.dtype, exp: regime.exp, mode: "neg-zeros" };
  };
  return { logical, held, input };
}

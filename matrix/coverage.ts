/**
 * What a matrix covers, by design rather than by hand (issue 14): every (check, tolerance class) pair
 * on a cell where that check can fail, the clip corners (clip_coef < 1 with a large and a small norm
 * for every dtype and every p in CORNER_NORMS, clip_coef = 1 for every p), and reduction groups in
 * which some rank holds only empty shards, on the dense and on the sparse mesh.
 *
 * Each requirement counts the matrix's cases that meet it; `clip-parity list matrices --coverage`
 * prints the table and suites/strength/coverage.test.ts asserts that cpu and nightly meet every one.
 * A case is judged from what the checks would see: the reference norm and clip coefficient (computed
 * as the cell computes them), the regime and the default plan of the model on the layout.
 */
import { CHECK_IDS, CHECK_INFO, type CanFailFacts } from "../harness/checks/index.ts";
import { clipCoefficient } from "../harness/subject/api.ts";
import { computeReference } from "../harness/gradients/reference.ts";
import { f32UlpsBetween, maxNormOf, regimeSpec } from "../harness/gradients/regimes.ts";
import { BUILTIN_SUBJECTS } from "../harness/registry/registry.ts";
import { validateLayout, worldSize, type ValidLayout } from "../harness/layout/layout.ts";
import { getModel } from "../harness/model/models.ts";
import { planWorld, type LocalParam } from "../harness/model/plan.ts";
import { DTYPES, formatNorm, type Case, type Matrix } from "../harness/cell/cell.ts";
import { meshesOf, reductionGroup } from "../harness/world/context.ts";
import { CORNER_NORMS } from "./index.ts";
import { loadRegressions, regressionSections, type Regression } from "./regressions.ts";
import { fuzzPlan } from "../harness/fuzz/case.ts";
import { subjectsOf } from "../harness/run/policy.ts";

/** What the checks can see of one case: what their `canFail` reads, and what the corner requirements read. */
export interface CaseFacts extends CanFailFacts {
  dtype: string;
  normType: number;
  /** The regime's gradient exponent: 0 = large norms, < 0 = small ones. */
  exp: number;
  /** A reduction group where some rank holds only empty shards (of params with a gradient), per mesh. */
  emptyGroup: { dense: boolean; sparse: boolean };
  /** Two ranks share two reduction groups whose partials may be ordered differently on each (groupFactsOfPlan). */
  sharedGroups: boolean;
  /** Some gradient is Partial(sum) over 2+ ranks: its partials must be summed, not taken for shards. */
  partialSum: boolean;
  /** How many float32 ulps max_norm lies above (> 0) or below the reference norm; null when not both finite float32. */
  maxNormUlps: number | null;
  /** The regime's special value at element 0 (Infinity, NaN, -Infinity), or null. */
  special: number | null;
  /** The reference norm (float32). */
  referenceNorm: number;
  /**
   * The norm adds partial norms of several ranks: finite p and a reduction group of 2+ ranks holding
   * gradients, or pp > 1. Only there can a clip that adds torch's 1e-6 to each rank's partial norm before
   * the sum (instead of once, to the reduced norm) get another coefficient; one rank, a MAX (inf) or
   * Replicate-only copies add it once whatever the clip does.
   */
  sumsPartialNorms: boolean;
}

interface GroupFacts {
  emptyGroup: { dense: boolean; sparse: boolean };
  sharedGroups: boolean;
  partialSum: boolean;
  /** Some reduction group of 2+ ranks holds gradients, or there are several stages: partials of several ranks are summed. */
  crossRank: boolean;
}
const groupCache = new Map<string, GroupFacts>();

/** One reduction group (a set of ranks: what a bucketing subject keys its buckets by) and what each member holds of it. */
interface GroupHolding {
  ranks: readonly number[];
  meshes: Set<"dense" | "sparse">;
  /** rank -> local elements of the group's parameters (canonical copies with a gradient). */
  byRank: Map<number, number>;
}

/** The plan's reduction groups, by key, with their members' local element counts: the one pass both group facts read. */
function groupHoldings(plan: readonly (readonly LocalParam[])[], layout: ValidLayout, hasGrad: (index: number) => boolean): Map<string, GroupHolding> {
  const meshes = meshesOf(layout);
  const held = new Map<string, GroupHolding>();
  plan.forEach((params, rank) => {
    for (const p of params) {
      if (!p.canonical || !hasGrad(p.index)) continue;
      const g = reductionGroup(meshes, rank, p, p.placements.map((x) => x.kind === "shard"));
      const e = held.get(g.key) ?? { ranks: g.ranks, meshes: new Set(), byRank: new Map() };
      e.meshes.add(p.mesh);
      e.byRank.set(rank, (e.byRank.get(rank) ?? 0) + p.numel);
      held.set(g.key, e);
    }
  });
  return held;
}

/**
 * Per mesh: is there a reduction group that some member holds only empty shards of, while another
 * member holds elements? The group counts for each mesh that one of its parameters lives on.
 */
function emptyGroups(held: ReadonlyMap<string, GroupHolding>): { dense: boolean; sparse: boolean } {
  const out = { dense: false, sparse: false };
  for (const e of held.values()) {
    const counts = [...e.byRank.values()];
    if (counts.some((n) => n === 0) && counts.some((n) => n > 0)) for (const m of e.meshes) out[m] = true;
  }
  return out;
}

/**
 * Whether two ranks share two reduction groups of several ranks whose partial sums may be ordered
 * differently on the two ranks: the groups' local element counts are ordered differently (an empty
 * shard against a full one), or lie within a factor of 4 on both (close partials at any finite p). A
 * subject that issues its bucket collectives in an order taken from its partials hangs there. (On the
 * debug models one group holds thousands of elements and the other millions, on every rank: their
 * partials are ordered alike on every rank but for the inf-norm.)
 */
function sharedGroups(held: ReadonlyMap<string, GroupHolding>): boolean {
  const groups = [...held.values()].filter((g) => g.ranks.length >= 2);
  const counts = (rank: number, a: GroupHolding, b: GroupHolding) => [a.byRank.get(rank) ?? 0, b.byRank.get(rank) ?? 0] as const;
  const close = ([x, y]: readonly [number, number]) => x > 0 && y > 0 && Math.max(x, y) <= 4 * Math.min(x, y);
  for (const [i, a] of groups.entries()) {
    for (const b of groups.slice(i + 1)) {
      const both = a.ranks.filter((r) => b.ranks.includes(r));
      for (const [j, r1] of both.entries()) {
        for (const r2 of both.slice(j + 1)) {
          const [c1, c2] = [counts(r1, a, b), counts(r2, a, b)];
          if (Math.sign(c1[0] - c1[1]) !== Math.sign(c2[0] - c2[1]) || (close(c1) && close(c2))) return true;
        }
      }
    }
  }
  return false;
}

/** The reduction-group facts of a plan (canonical copies with a gradient count). */
export function groupFactsOfPlan(plan: readonly (readonly LocalParam[])[], layout: ValidLayout, hasGrad: (index: number) => boolean): Pick<GroupFacts, "emptyGroup" | "sharedGroups"> {
  const held = groupHoldings(plan, layout, hasGrad);
  return { emptyGroup: emptyGroups(held), sharedGroups: sharedGroups(held) };
}

function groupFacts(c: Case, hasGrad: (index: number) => boolean, regime: string): GroupFacts {
  const key = `${c.model}|${JSON.stringify(c.layout)}|${regime}`;
  let hit = groupCache.get(key);
  if (!hit) {
    const layout = validateLayout(c.layout);
    const plan = planWorld(getModel(c.model), layout);
    const partialSum = plan.some((params) => params.some((p) => p.canonical && hasGrad(p.index) && (p.partial?.count ?? 0) >= 2));
    const crossRank = layout.pp > 1 || [...groupHoldings(plan, layout, hasGrad).values()].some((g) => g.ranks.length >= 2);
    hit = { ...groupFactsOfPlan(plan, layout, hasGrad), partialSum, crossRank };
    groupCache.set(key, hit);
  }
  return hit;
}

export function caseFacts(c: Case): CaseFacts {
  const model = getModel(c.model);
  const spec = regimeSpec(c.regime);
  const ref = computeReference(model, c.dtype, c.normType, c.regime, c.seed, c.step ?? 0);
  const maxNorm = maxNormOf(c, ref.totalNorm);
  const layout = validateLayout(c.layout);
  const groups = groupFacts(c, spec.hasGrad, c.regime);
  return {
    world: worldSize(layout),
    dtype: c.dtype,
    normType: c.normType,
    exp: spec.exp,
    paramsWithGrad: ref.paramsWithGrad,
    referenceFinite: Number.isFinite(ref.totalNorm),
    clipCoef: clipCoefficient(maxNorm, ref.totalNorm),
    errorIfNonfinite: c.errorIfNonfinite ?? spec.errorIfNonfinite,
    tiedReplica: layout.pp > 1 && model.ties.some((t) => spec.hasGrad(model.params.find((p) => p.name === t.canonical)!.index)),
    ...groups,
    maxNormUlps: f32UlpsBetween(ref.totalNorm, maxNorm),
    special: spec.special,
    referenceNorm: ref.totalNorm,
    sumsPartialNorms: Number.isFinite(c.normType) && groups.crossRank && ref.paramsWithGrad > 0,
  };
}

/** Whether a check can fail on a case (what it judges is there to be judged): the check's own `canFail`. */
export function checkCanFail(check: string, f: CaseFacts): boolean {
  const info = CHECK_INFO.get(check);
  if (!info) throw new Error(`internal: matrix/coverage.ts checkCanFail: no check "${check}" (harness/checks/index.ts lists them)`);
  return info.canFail(f);
}

export interface Requirement {
  id: string;
  /** Cases of the matrix that meet it. */
  cases: number;
  /** Cases it needs (a corner met by one cell alone is met by chance). */
  min: number;
}

export interface Coverage {
  matrix: string;
  requirements: Requirement[];
  met: number;
}

/** A requirement: what a case must show, and how many cases must show it. */
interface Want {
  id: string;
  holds: (f: CaseFacts) => boolean;
  min?: number;
}

/** The structural facts a regression cell (a fuzz case) shows, for the requirements they can meet. */
function regressionFacts(r: Regression): Pick<CaseFacts, "emptyGroup" | "sharedGroups" | "normType"> {
  const c = { ...r.fuzzCase, subject: "" };
  const spec = regimeSpec(c.regime);
  const plan = fuzzPlan(c);
  const layout = validateLayout(c.layout);
  return { ...groupFactsOfPlan(plan, layout, spec.hasGrad), normType: c.normType };
}

/** Requirements on the shape of the reduction groups: met by model cases and by regression cells alike. */
const GROUP_WANTS: { id: string; holds: (f: Pick<CaseFacts, "emptyGroup" | "sharedGroups" | "normType">) => boolean; min?: number }[] = [
  { id: "reduction group with a rank holding only empty shards: dense mesh", holds: (f) => f.emptyGroup.dense },
  { id: "reduction group with a rank holding only empty shards: sparse mesh", holds: (f) => f.emptyGroup.sparse },
  { id: "two ranks sharing two reduction groups whose partials may be ordered differently by rank, finite p", holds: (f) => f.sharedGroups && Number.isFinite(f.normType), min: 2 },
];

function wants(subjects: readonly string[]): Want[] {
  const classes = [...new Set(subjects.map((s) => (Object.hasOwn(BUILTIN_SUBJECTS, s) ? (BUILTIN_SUBJECTS[s]!.tolerance ?? "fp32") : "fp32")))].sort();
  const reqs: Want[] = [];
  for (const check of CHECK_IDS) for (const cls of classes) reqs.push({ id: `${check} x ${cls}: can fail`, holds: (f) => checkCanFail(check, f) });
  const scaledAt = (f: CaseFacts, dtype: string, p: number) => f.dtype === dtype && f.normType === p && f.paramsWithGrad > 0 && f.referenceFinite;
  for (const dtype of DTYPES) {
    for (const p of CORNER_NORMS) {
      reqs.push({ id: `clip_coef < 1, large norm (e = 0): ${dtype} p=${formatNorm(p)}`, holds: (f) => scaledAt(f, dtype, p) && f.exp === 0 && f.clipCoef < 1 });
      reqs.push({ id: `clip_coef < 1, small norm (e < 0): ${dtype} p=${formatNorm(p)}`, holds: (f) => scaledAt(f, dtype, p) && f.exp < 0 && f.clipCoef < 1 });
    }
  }
  for (const p of CORNER_NORMS) reqs.push({ id: `clip_coef = 1 (nothing to scale): p=${formatNorm(p)}`, holds: (f) => f.normType === p && f.paramsWithGrad > 0 && f.clipCoef === 1 });
  // where a `norm > max_norm` guard written for the clamp differs from torch: max_norm on the norm or just above, still clipped
  for (const p of CORNER_NORMS.filter((q) => Number.isFinite(q))) {
    const small = (f: CaseFacts, ulps: number) => scaledAt(f, "f32", p) && f.exp < 0 && f.clipCoef < 1 && f.maxNormUlps === ulps;
    reqs.push({ id: `max_norm equal to a small norm, clip_coef < 1: p=${formatNorm(p)}`, holds: (f) => small(f, 0), min: 2 });
    reqs.push({ id: `max_norm one ulp above a small norm, clip_coef < 1: p=${formatNorm(p)}`, holds: (f) => small(f, 1), min: 2 });
  }
  // torch multiplies by a NaN coefficient there: a `clip_coef < 1` guard leaves the gradients as they were
  for (const p of CORNER_NORMS) reqs.push({ id: `NaN with error_if_nonfinite=False: p=${formatNorm(p)}`, holds: (f) => f.normType === p && Number.isNaN(f.special ?? 0) && !f.errorIfNonfinite, min: 2 });
  // the clip's 1e-6 far above the norm (`tiny`): where it is added (once, or to each rank's partial norm) decides the coefficient
  for (const dtype of ["f32", "bf16"]) {
    reqs.push({
      id: `norm far below the clip's 1e-6, clip_coef < 1, partial norms of several ranks summed: ${dtype}`,
      holds: (f) => f.dtype === dtype && f.sumsPartialNorms && f.referenceFinite && f.referenceNorm < 1e-7 && f.clipCoef < 1,
      min: 6,
    });
  }
  reqs.push({ id: "non-integer p on a layout of several ranks", holds: (f) => f.normType !== Math.trunc(f.normType) && f.world > 1 && f.paramsWithGrad > 0, min: 6 });
  // a clip that takes a Partial(sum) gradient's partials for shards shows only where there are 2+ partials to sum
  reqs.push({ id: "Partial(sum) gradient over 2+ ranks, finite norm", holds: (f) => f.partialSum && f.referenceFinite && f.paramsWithGrad > 0, min: 4 });
  for (const g of GROUP_WANTS) reqs.push(g);
  return reqs;
}

/**
 * The requirements and how many of the matrix's cases meet each. A matrix with a regression section
 * (cpu: its whole run also runs matrix/regressions.json) counts those cells for the group requirements.
 */
export function matrixCoverage(matrix: Pick<Matrix, "name" | "cases" | "subjects">, regressions: readonly Regression[] = Object.hasOwn(regressionSections(), matrix.name) ? regressionSections()[matrix.name]! : []): Coverage {
  const reqs = wants(subjectsOf(matrix, undefined));
  const counts = reqs.map(() => 0);
  for (const c of matrix.cases) {
    const f = caseFacts(c);
    reqs.forEach((r, i) => {
      if (r.holds(f)) counts[i]!++;
    });
  }
  for (const r of regressions) {
    const f = regressionFacts(r);
    for (const g of GROUP_WANTS) if (g.holds(f)) counts[reqs.findIndex((w) => w.id === g.id)]!++;
  }
  const requirements = reqs.map((r, i) => ({ id: r.id, cases: counts[i]!, min: r.min ?? 1 }));
  return { matrix: matrix.name, requirements, met: requirements.filter((r) => r.cases >= r.min).length };
}

/** The coverage table as `list matrices --coverage` prints it. */
export function formatCoverage(c: Coverage): string {
  const lines = [`coverage of ${c.matrix}: ${c.met} of ${c.requirements.length} requirements met`];
  for (const r of c.requirements) lines.push(`  ${r.cases >= r.min ? "ok     " : "MISSING"} ${String(r.cases).padStart(5)}  ${r.id}${r.min > 1 ? ` (at least ${r.min})` : ""}`);
  return lines.join("\n") + "\n";
}

/** What the fixed regression cells (matrix/regressions.json) add: group shapes the debug models lack. */
export function regressionsCoverage(regressions: readonly Regression[] = loadRegressions()): string {
  const lines = [`regression cells (matrix/regressions.json): ${regressions.length} cells`];
  const facts = regressions.map(regressionFacts);
  for (const g of GROUP_WANTS) {
    const n = facts.filter((f) => g.holds(f)).length;
    lines.push(`  ${n > 0 ? "ok     " : "MISSING"} ${String(n).padStart(5)}  ${g.id}`);
  }
  return lines.join("\n") + "\n";
}

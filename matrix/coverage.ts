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
import { CHECK_IDS } from "../harness/checks/index.ts";
import { clipCoefficient } from "../harness/clip/api.ts";
import { computeReference } from "../harness/clip/reference.ts";
import { maxNormOf, regimeSpec } from "../harness/clip/regimes.ts";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS } from "../harness/clip/registry.ts";
import { validateLayout, worldSize, type ValidLayout } from "../harness/layout/layout.ts";
import { getModel } from "../harness/model/models.ts";
import { planWorld, type LocalParam } from "../harness/model/plan.ts";
import { DTYPES, formatNorm, type Case, type Matrix } from "../harness/spec/cell.ts";
import { meshesOf, reductionGroup } from "../harness/world/context.ts";
import { CORNER_NORMS } from "./index.ts";
import { loadRegressions, type Regression } from "./regressions.ts";
import { fuzzPlan } from "../harness/fuzz/case.ts";

/** What the checks can see of one case. */
export interface CaseFacts {
  world: number;
  dtype: string;
  normType: number;
  /** The regime's gradient exponent: 0 = large norms, < 0 = small ones. */
  exp: number;
  paramsWithGrad: number;
  referenceFinite: boolean;
  clipCoef: number;
  errorIfNonfinite: boolean;
  /** Some tied parameter has a replica on another stage, with a gradient. */
  tiedReplica: boolean;
  /** A reduction group where some rank holds only empty shards (of params with a gradient), per mesh. */
  emptyGroup: { dense: boolean; sparse: boolean };
}

const emptyGroupCache = new Map<string, { dense: boolean; sparse: boolean }>();

/**
 * Per mesh: is there a reduction group (a set of ranks: what a bucketing subject keys its buckets by)
 * that some member holds only empty shards of, while another member holds elements? The group counts
 * for each mesh that one of its parameters lives on. Only canonical copies with a gradient count.
 */
export function emptyGroupsOfPlan(plan: readonly (readonly LocalParam[])[], layout: ValidLayout, hasGrad: (index: number) => boolean): { dense: boolean; sparse: boolean } {
  const meshes = meshesOf(layout);
  const held = new Map<string, { meshes: Set<"dense" | "sparse">; byRank: Map<number, number> }>();
  plan.forEach((params, rank) => {
    for (const p of params) {
      if (!p.canonical || !hasGrad(p.index)) continue;
      const g = reductionGroup(meshes, rank, p, p.placements.map((x) => x.kind !== "replicate")).key;
      const e = held.get(g) ?? { meshes: new Set(), byRank: new Map() };
      e.meshes.add(p.mesh);
      e.byRank.set(rank, (e.byRank.get(rank) ?? 0) + p.numel);
      held.set(g, e);
    }
  });
  const out = { dense: false, sparse: false };
  for (const e of held.values()) {
    const counts = [...e.byRank.values()];
    if (counts.some((n) => n === 0) && counts.some((n) => n > 0)) for (const m of e.meshes) out[m] = true;
  }
  return out;
}

function emptyGroups(c: Case, hasGrad: (index: number) => boolean, regime: string): { dense: boolean; sparse: boolean } {
  const key = `${c.model}|${JSON.stringify(c.layout)}|${regime}`;
  let hit = emptyGroupCache.get(key);
  if (!hit) {
    const layout = validateLayout(c.layout);
    hit = emptyGroupsOfPlan(planWorld(getModel(c.model), layout), layout, hasGrad);
    emptyGroupCache.set(key, hit);
  }
  return hit;
}

export function caseFacts(c: Case): CaseFacts {
  const model = getModel(c.model);
  const spec = regimeSpec(c.regime);
  const ref = computeReference(model, c.dtype, c.normType, c.regime, c.seed, c.step ?? 0);
  const maxNorm = maxNormOf(c, ref.totalNorm);
  const layout = validateLayout(c.layout);
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
    emptyGroup: emptyGroups(c, spec.hasGrad, c.regime),
  };
}

/** Whether a check can fail on a case (what it judges is there to be judged). */
export function checkCanFail(check: string, f: CaseFacts): boolean {
  const scaled = f.paramsWithGrad > 0 && f.referenceFinite && f.clipCoef < 1;
  switch (check) {
    case "parity.norm":
      return f.referenceFinite && f.paramsWithGrad > 0;
    case "parity.tensors":
    case "scaling.nonempty":
      return scaled;
    case "scaling.replicas":
      return scaled && f.tiedReplica;
    case "parity.ranks":
    case "liveness":
    case "comm.budget":
      return f.world > 1;
    case "errors.nonfinite":
      return f.errorIfNonfinite && !f.referenceFinite;
    case "memory.peak":
    case "memory.leak":
      return f.paramsWithGrad > 0;
    default:
      return false;
  }
}

export interface Requirement {
  id: string;
  /** Cases of the matrix that meet it. */
  cases: number;
}

export interface Coverage {
  matrix: string;
  requirements: Requirement[];
  met: number;
}

/** The requirements and how many of the matrix's cases meet each. */
export function matrixCoverage(matrix: Pick<Matrix, "name" | "cases" | "subjects">): Coverage {
  const subjects = matrix.subjects ?? CORRECT_SUBJECTS;
  const classes = [...new Set(subjects.map((s) => (Object.hasOwn(BUILTIN_SUBJECTS, s) ? (BUILTIN_SUBJECTS[s]!.tolerance ?? "fp32") : "fp32")))].sort();
  const reqs: { id: string; holds: (f: CaseFacts) => boolean }[] = [];
  for (const check of CHECK_IDS) for (const cls of classes) reqs.push({ id: `${check} x ${cls}: can fail`, holds: (f) => checkCanFail(check, f) });
  const scaledAt = (f: CaseFacts, dtype: string, p: number) => f.dtype === dtype && f.normType === p && f.paramsWithGrad > 0 && f.referenceFinite;
  for (const dtype of DTYPES) {
    for (const p of CORNER_NORMS) {
      reqs.push({ id: `clip_coef < 1, large norm (e = 0): ${dtype} p=${formatNorm(p)}`, holds: (f) => scaledAt(f, dtype, p) && f.exp === 0 && f.clipCoef < 1 });
      reqs.push({ id: `clip_coef < 1, small norm (e < 0): ${dtype} p=${formatNorm(p)}`, holds: (f) => scaledAt(f, dtype, p) && f.exp < 0 && f.clipCoef < 1 });
    }
  }
  for (const p of CORNER_NORMS) reqs.push({ id: `clip_coef = 1 (nothing to scale): p=${formatNorm(p)}`, holds: (f) => f.normType === p && f.paramsWithGrad > 0 && f.clipCoef === 1 });
  reqs.push({ id: "reduction group with a rank holding only empty shards: dense mesh", holds: (f) => f.emptyGroup.dense });
  reqs.push({ id: "reduction group with a rank holding only empty shards: sparse mesh", holds: (f) => f.emptyGroup.sparse });

  const counts = reqs.map(() => 0);
  for (const c of matrix.cases) {
    const f = caseFacts(c);
    reqs.forEach((r, i) => {
      if (r.holds(f)) counts[i]!++;
    });
  }
  const requirements = reqs.map((r, i) => ({ id: r.id, cases: counts[i]! }));
  return { matrix: matrix.name, requirements, met: requirements.filter((r) => r.cases > 0).length };
}

/** The coverage table as `list matrices --coverage` prints it. */
export function formatCoverage(c: Coverage): string {
  const lines = [`coverage of ${c.matrix}: ${c.met} of ${c.requirements.length} requirements met`];
  for (const r of c.requirements) lines.push(`  ${r.cases > 0 ? "ok     " : "MISSING"} ${String(r.cases).padStart(5)}  ${r.id}`);
  return lines.join("\n") + "\n";
}

/** What the fixed regression cells (matrix/regressions.json) add: the empty-shard groups the debug models lack. */
export function regressionsCoverage(regressions: readonly Regression[] = loadRegressions()): string {
  let dense = 0;
  let sparse = 0;
  for (const r of regressions) {
    const c = { ...r.fuzzCase, subject: "" };
    const spec = regimeSpec(c.regime);
    const e = emptyGroupsOfPlan(fuzzPlan(c), validateLayout(c.layout), spec.hasGrad);
    dense += Number(e.dense);
    sparse += Number(e.sparse);
  }
  return (
    `regression cells (matrix/regressions.json): ${regressions.length} cells\n` +
    `  ${dense ? "ok     " : "MISSING"} ${String(dense).padStart(5)}  reduction group with a rank holding only empty shards: dense mesh\n` +
    `  ${sparse ? "ok     " : "MISSING"} ${String(sparse).padStart(5)}  reduction group with a rank holding only empty shards: sparse mesh\n`
  );
}

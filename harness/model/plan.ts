/**
 * The sharding plan (SPEC §4): which physical copies of which logical parameters each rank holds, on
 * which mesh, with which placements, and the hyper-rectangle (block) of the global tensor it holds.
 *
 * Defaults (documented choices where the spec is silent):
 * - dense params live on the dense mesh without pp: (dp_replicate, dp_shard, cp, tp) with placements
 *   Replicate, Shard(0), Shard(0), and on tp: colwise Shard(0), rowwise Shard(1), replicate Replicate.
 *   1-D params (norms) are Shard(0) on dp_shard and cp as well (FSDP shards every param on dim 0).
 * - expert params [E, out, in] (tp style "expert") live on the sparse mesh without pp:
 *   (dp_replicate, efsdp, ep) with Replicate, Shard(1), Shard(0) — whatever ep is (ep = 1 included).
 * - a dim split by several axes is split outer axis first, each split as torch.chunk does (chunk size
 *   ceil(n/k), trailing chunks smaller or empty).
 * - stages: layer l on stage s with floor(s*L/pp) <= l < floor((s+1)*L/pp); embedding-kind params
 *   without a layer on stage 0; every other param without a layer (final norm, output, mtp.*) and every
 *   tie replica on the last stage. A replica whose stage is the canonical copy's stage (always so when
 *   pp == 1) is the same tensor as the canonical copy: only the canonical copy is emitted.
 * - a replica LocalParam carries the logical param's name, index, kind and layer, its own fqn and its
 *   own tp style (hence placements), and canonical = false.
 */
import { LayoutError, ModelError } from "../errors.ts";
import { worldSize, type ValidLayout } from "../layout/layout.ts";
import { coordsOf, denseMesh, DENSE_STAGE_AXES, SPARSE_STAGE_AXES, sparseMesh, type AxisName, type Mesh, type MeshName } from "../layout/mesh.ts";
import type { LogicalParam, ModelManifest, ParamKind, TpStyle } from "./manifest.ts";

export type Placement = { kind: "shard"; dim: number } | { kind: "replicate" } | { kind: "partial" };

/** A hyper-rectangle of the global tensor: dims [start[d], start[d]+len[d]). */
export interface Block {
  globalShape: number[];
  start: number[];
  len: number[];
}

export interface LocalParam {
  /** physical name (a replica's own fqn) */
  fqn: string;
  /** canonical logical name (the generator key) */
  name: string;
  /** manifest index of the logical param */
  index: number;
  /** true for the canonical physical copy (the only copy when pp == 1) */
  canonical: boolean;
  /** canonical name when the param is in a tie group, else null */
  tieGroup: string | null;
  kind: ParamKind;
  layer: number | null;
  stage: number;
  /** "dense" or "sparse" (experts) */
  mesh: MeshName;
  /** the param's mesh WITHOUT pp */
  meshAxes: AxisName[];
  /** aligned with meshAxes */
  placements: Placement[];
  /** this rank's local shard (len may contain 0: empty shard) */
  block: Block;
  /** product of block.len */
  numel: number;
  /**
   * Present when some placement is Partial: this copy's partial, `index` = its row-major coordinate over
   * the Partial axes (in meshAxes order) of `count` = their product (gradients/specs.ts: what it holds).
   */
  partial?: PartialSlot;
}

/** Which of a Partial(sum) gradient's partials one rank holds. */
export interface PartialSlot {
  index: number;
  count: number;
}

export const Shard = (dim: number): Placement => ({ kind: "shard", dim });
export const Replicate: Placement = Object.freeze({ kind: "replicate" }) as Placement;
export const Partial: Placement = Object.freeze({ kind: "partial" }) as Placement;

function checkStageArgs(nLayers: number, pp: number): void {
  if (!Number.isSafeInteger(nLayers) || nLayers < 0) throw new ModelError(`nLayers(${nLayers}) must be a non-negative integer`);
  if (!Number.isSafeInteger(pp) || pp < 1) throw new LayoutError(`pp(${pp}) must be a positive integer`);
}

/** The stage holding `layer`: the s with floor(s*L/pp) <= layer < floor((s+1)*L/pp). */
export function stageOfLayer(layer: number, nLayers: number, pp: number): number {
  checkStageArgs(nLayers, pp);
  if (!Number.isInteger(layer) || layer < 0 || layer >= nLayers) {
    throw new ModelError(`layer ${layer} is outside 0..${nLayers - 1}`);
  }
  // largest s with floor(s*L/pp) <= layer  <=>  s*L < (layer+1)*pp
  return Math.ceil(((layer + 1) * pp) / nLayers) - 1;
}

/** Layers of `stage`: [inclusive start, exclusive end); may be empty. */
export function stageLayers(stage: number, nLayers: number, pp: number): [number, number] {
  checkStageArgs(nLayers, pp);
  if (!Number.isInteger(stage) || stage < 0 || stage >= pp) throw new LayoutError(`stage ${stage} is outside 0..${pp - 1}`);
  return [Math.floor((stage * nLayers) / pp), Math.floor(((stage + 1) * nLayers) / pp)];
}

/** The stage of a logical param's canonical copy. */
export function stageOfParam(p: LogicalParam, nLayers: number, pp: number): number {
  if (p.layer !== null) return stageOfLayer(p.layer, nLayers, pp);
  return p.kind === "embedding" ? 0 : pp - 1;
}

/** torch.chunk(n, k)[i] as [start, len]: chunk size ceil(n/k); trailing chunks smaller or empty. */
export function chunkRange(n: number, k: number, i: number): [start: number, len: number] {
  if (!Number.isSafeInteger(n) || n < 0) throw new ModelError(`chunkRange: n(${n}) must be a non-negative integer`);
  if (!Number.isSafeInteger(k) || k < 1) throw new ModelError(`chunkRange: k(${k}) must be a positive integer`);
  if (!Number.isInteger(i) || i < 0 || i >= k) throw new ModelError(`chunkRange: i(${i}) is outside 0..${k - 1}`);
  const c = Math.ceil(n / k);
  const start = Math.min(i * c, n);
  return [start, Math.min(c, n - start)];
}

const DENSE_AXES_NO_PP: readonly AxisName[] = DENSE_STAGE_AXES;
const SPARSE_AXES_NO_PP: readonly AxisName[] = SPARSE_STAGE_AXES;

/** Mesh, mesh axes (without pp) and placements of a param (or of a replica: its tp style, the logical shape). */
export function placementsFor(
  p: LogicalParam | { tp: TpStyle; shape: number[]; partialOver?: readonly AxisName[] },
  l: ValidLayout,
): { mesh: MeshName; meshAxes: AxisName[]; placements: Placement[] } {
  const what = "name" in p ? p.name : `a ${p.tp} param`;
  const d = defaultPlacements(p, what);
  return { ...d, placements: withPartial(d.placements, d.meshAxes, p.partialOver, what) };
}

/** SPEC §4's default placements of a TP style. */
function defaultPlacements(p: { tp: TpStyle; shape: number[] }, what: string): { mesh: MeshName; meshAxes: AxisName[]; placements: Placement[] } {
  const need = (dim: number): Placement => {
    if (dim >= p.shape.length) {
      throw new ModelError(`${what} of shape [${p.shape.join(", ")}] has no dim ${dim} to shard (tp style ${p.tp})`);
    }
    return Shard(dim);
  };
  switch (p.tp) {
    case "expert":
      if (p.shape.length !== 3) throw new ModelError(`${what}: an expert param must be [E, out, in]; got [${p.shape.join(", ")}]`);
      return { mesh: "sparse", meshAxes: [...SPARSE_AXES_NO_PP], placements: [Replicate, Shard(1), Shard(0)] };
    case "colwise":
    case "rowwise":
    case "replicate": {
      const tp = p.tp === "colwise" ? need(0) : p.tp === "rowwise" ? need(1) : Replicate;
      const fsdp = need(0);
      return { mesh: "dense", meshAxes: [...DENSE_AXES_NO_PP], placements: [Replicate, fsdp, Shard(0), tp] };
    }
    default:
      throw new ModelError(`${what}: unknown tp style "${String((p as { tp: unknown }).tp)}"`);
  }
}

/**
 * The block of the global tensor held at `coords` (aligned with meshAxes / placements / meshSizes).
 * Axes are applied outer first, so a dim split by several axes is a chunk of a chunk. Replicate and
 * Partial leave the block unchanged (a Partial copy has the full extent).
 */
export function localBlock(
  globalShape: number[],
  meshAxes: AxisName[],
  placements: Placement[],
  meshSizes: number[],
  coords: number[],
): Block {
  const n = meshAxes.length;
  if (placements.length !== n || meshSizes.length !== n || coords.length !== n) {
    throw new ModelError(
      `localBlock: ${n} mesh axes but ${placements.length} placements, ${meshSizes.length} sizes, ${coords.length} coords`,
    );
  }
  const start = globalShape.map(() => 0);
  const len = globalShape.slice();
  for (let a = 0; a < n; a++) {
    const pl = placements[a]!;
    if (pl.kind !== "shard") continue;
    const d = pl.dim;
    if (!Number.isInteger(d) || d < 0 || d >= globalShape.length) {
      throw new ModelError(`localBlock: Shard(${d}) on axis ${meshAxes[a]} of a tensor of shape [${globalShape.join(", ")}]`);
    }
    const [s, k] = chunkRange(len[d]!, meshSizes[a]!, coords[a]!);
    start[d] = start[d]! + s;
    len[d] = k;
  }
  return { globalShape: globalShape.slice(), start, len };
}

/** The partial held at `coords` (aligned with placements / meshSizes), or undefined without a Partial axis. */
export function partialSlot(placements: readonly Placement[], meshSizes: readonly number[], coords: readonly number[]): PartialSlot | undefined {
  let index = 0;
  let count = 1;
  placements.forEach((pl, a) => {
    if (pl.kind !== "partial") return;
    index = index * meshSizes[a]! + coords[a]!;
    count *= meshSizes[a]!;
  });
  return placements.some((pl) => pl.kind === "partial") ? { index, count } : undefined;
}

/** Placements with the axes in `partialOver` made Partial (a LogicalParam's unreduced gradient). */
function withPartial(placements: Placement[], meshAxes: readonly AxisName[], partialOver: readonly AxisName[] | undefined, what: string): Placement[] {
  if (!partialOver?.length) return placements;
  for (const a of partialOver) {
    if (!meshAxes.includes(a)) throw new ModelError(`${what}: partialOver axis "${a}" is not an axis of its mesh (${meshAxes.join(", ")})`);
  }
  return placements.map((pl, i) => (partialOver.includes(meshAxes[i]!) ? Partial : pl));
}

function prod(xs: readonly number[]): number {
  let n = 1;
  for (const x of xs) n *= x;
  return n;
}

/** Precomputed per-model, per-layout tables shared by every rank. */
class Planner {
  readonly l: ValidLayout;
  readonly pp: number;
  readonly byStage: LogicalParam[][];
  readonly replicasByStage: { p: LogicalParam; fqn: string; tp: TpStyle }[][];
  private readonly denseM: Mesh;
  private readonly sparseM: Mesh;
  private readonly placed = new Map<string, { mesh: MeshName; meshAxes: AxisName[]; placements: Placement[] }>();

  constructor(
    readonly model: ModelManifest,
    layout: ValidLayout,
  ) {
    this.l = layout;
    this.pp = this.l.pp;
    this.denseM = denseMesh(this.l);
    this.sparseM = sparseMesh(this.l);
    this.byStage = Array.from({ length: this.pp }, () => []);
    this.replicasByStage = Array.from({ length: this.pp }, () => []);
    const byName = new Map<string, LogicalParam>();
    for (const p of model.params) {
      byName.set(p.name, p);
      this.byStage[stageOfParam(p, model.nLayers, this.pp)]!.push(p);
    }
    for (const t of model.ties) {
      const p = byName.get(t.canonical);
      if (!p) throw new ModelError(`model ${model.name}: tie group of unknown parameter ${t.canonical}`);
      const cs = stageOfParam(p, model.nLayers, this.pp);
      for (const r of t.replicas) {
        const rs = this.pp - 1; // r.stage === "last"
        if (rs !== cs) this.replicasByStage[rs]!.push({ p, fqn: r.fqn, tp: r.tp });
      }
    }
  }

  tieNames(): Set<string> {
    return new Set(this.model.ties.map((t) => t.canonical));
  }

  private placementOf(tp: TpStyle, p: LogicalParam, canonical: boolean) {
    // a replica is never Partial (tied params cannot be: ManifestBuilder.build)
    const partialOver = canonical ? p.partialOver : undefined;
    const key = `${tp}|${p.shape.length}|${partialOver?.join(",") ?? ""}`;
    let hit = this.placed.get(key);
    if (!hit) {
      hit = placementsFor({ tp, shape: p.shape, partialOver }, this.l);
      this.placed.set(key, hit);
    }
    return hit;
  }

  plan(rank: number, tied: Set<string>): LocalParam[] {
    const world = worldSize(this.l);
    if (!Number.isInteger(rank) || rank < 0 || rank >= world) {
      throw new LayoutError(`rank ${rank} is outside the world of ${world} ranks`);
    }
    const dc = coordsOf(this.denseM, rank);
    const sc = coordsOf(this.sparseM, rank);
    const stage = dc[0]!;
    const denseSizes = this.denseM.sizes.slice(1);
    const sparseSizes = this.sparseM.sizes.slice(1);
    const denseCoords = dc.slice(1);
    const sparseCoords = sc.slice(1);
    const out: LocalParam[] = [];
    const emit = (p: LogicalParam, fqn: string, tp: TpStyle, canonical: boolean): void => {
      const pl = this.placementOf(tp, p, canonical);
      const sparse = pl.mesh === "sparse";
      const sizes = sparse ? sparseSizes : denseSizes;
      const at = sparse ? sparseCoords : denseCoords;
      const block = localBlock(p.shape, pl.meshAxes, pl.placements, sizes, at);
      const partial = partialSlot(pl.placements, sizes, at);
      out.push({
        fqn,
        name: p.name,
        index: p.index,
        canonical,
        tieGroup: tied.has(p.name) ? p.name : null,
        kind: p.kind,
        layer: p.layer,
        stage,
        mesh: pl.mesh,
        meshAxes: pl.meshAxes.slice(),
        placements: pl.placements.map((x) => ({ ...x })),
        block,
        numel: prod(block.len),
        ...(partial ? { partial } : {}),
      });
    };
    for (const p of this.byStage[stage]!) emit(p, p.name, p.tp, true);
    for (const r of this.replicasByStage[stage]!) emit(r.p, r.fqn, r.tp, false);
    return out;
  }
}

/** The params physically on this rank, in manifest order (replicas after their stage's params). */
export function planRank(model: ModelManifest, l: ValidLayout, rank: number): LocalParam[] {
  const pl = new Planner(model, l);
  return pl.plan(rank, pl.tieNames());
}

/** planRank for every rank; index = rank. */
export function planWorld(model: ModelManifest, l: ValidLayout): LocalParam[][] {
  const pl = new Planner(model, l);
  const tied = pl.tieNames();
  const n = worldSize(pl.l);
  const out: LocalParam[][] = new Array(n);
  for (let r = 0; r < n; r++) out[r] = pl.plan(r, tied);
  return out;
}

/**
 * Device meshes over the ranks of a layout (SPEC §3), outermost axis first, row-major.
 *
 * - dense mesh: `pp, dp_replicate, dp_shard, cp, tp`;
 * - sparse mesh (expert params): `pp, dp_replicate, efsdp, ep` with `efsdp = dp_shard*cp*tp/ep`: a rank's
 *   row-major index over (dp_shard, cp, tp) is split row-major into (efsdp, ep). Since both meshes share
 *   the outer `pp, dp_replicate` and the inner product is the same, this is exactly the row-major
 *   decomposition of the rank over the sparse axes (tested).
 *
 * Every axis is present even when its size is 1.
 */
import { LayoutError } from "../errors.ts";
import type { ValidLayout } from "./layout.ts";

export type AxisName = "pp" | "dp_replicate" | "dp_shard" | "cp" | "tp" | "efsdp" | "ep";
export type MeshName = "dense" | "sparse";

/** A device mesh over all ranks of the world; axes outermost first. */
export interface Mesh {
  name: MeshName;
  axes: AxisName[];
  sizes: number[];
}

/** The one place the mesh axes are spelled out (SPEC §3); everything else derives from these. */
export const DENSE_AXES = ["pp", "dp_replicate", "dp_shard", "cp", "tp"] as const satisfies readonly AxisName[];
export const SPARSE_AXES = ["pp", "dp_replicate", "efsdp", "ep"] as const satisfies readonly AxisName[];
/** A PP stage's sub-mesh: every axis but pp (torchtitan builds one per stage). */
export const DENSE_STAGE_AXES = ["dp_replicate", "dp_shard", "cp", "tp"] as const satisfies readonly AxisName[];
export const SPARSE_STAGE_AXES = ["dp_replicate", "efsdp", "ep"] as const satisfies readonly AxisName[];
/** Axes that exist only on the sparse (expert) mesh. */
export const SPARSE_ONLY_AXES = ["efsdp", "ep"] as const satisfies readonly AxisName[];
/** Every axis name of both meshes, in a stable order. */
export const ALL_AXES: readonly AxisName[] = ["pp", "dp_replicate", "dp_shard", "cp", "tp", "efsdp", "ep"];

export function denseMesh(v: ValidLayout): Mesh {
  return { name: "dense", axes: [...DENSE_AXES], sizes: [v.pp, v.dp_replicate, v.dp_shard, v.cp, v.tp] };
}

export function sparseMesh(v: ValidLayout): Mesh {
  const efsdp = (v.dp_shard * v.cp * v.tp) / v.ep;
  return { name: "sparse", axes: [...SPARSE_AXES], sizes: [v.pp, v.dp_replicate, efsdp, v.ep] };
}

export function meshOf(name: MeshName, l: ValidLayout): Mesh {
  return name === "dense" ? denseMesh(l) : sparseMesh(l);
}

/** Number of ranks the mesh spans. */
export function meshSize(mesh: Mesh): number {
  return mesh.sizes.reduce((a, b) => a * b, 1);
}

/** Position of `axis` in the mesh; LayoutError when the mesh has no such axis. */
export function axisIndex(mesh: Mesh, axis: AxisName): number {
  const i = mesh.axes.indexOf(axis);
  if (i < 0) throw new LayoutError(`The ${mesh.name} mesh has no axis "${axis}" (its axes: ${mesh.axes.join(", ")})`);
  return i;
}

/** Row-major decomposition of `rank` over the mesh axes. */
export function coordsOf(mesh: Mesh, rank: number): number[] {
  const n = meshSize(mesh);
  if (!Number.isInteger(rank) || rank < 0 || rank >= n) {
    throw new LayoutError(`rank ${rank} is outside the ${mesh.name} mesh of ${n} ranks`);
  }
  const c = new Array<number>(mesh.sizes.length);
  let r = rank;
  for (let i = mesh.sizes.length - 1; i >= 0; i--) {
    const s = mesh.sizes[i]!;
    c[i] = r % s;
    r = Math.floor(r / s);
  }
  return c;
}

/** Inverse of coordsOf. */
export function rankAt(mesh: Mesh, coords: number[]): number {
  if (coords.length !== mesh.sizes.length) {
    throw new LayoutError(`coords [${coords.join(",")}] do not match the ${mesh.name} mesh axes (${mesh.axes.join(", ")})`);
  }
  let r = 0;
  for (let i = 0; i < mesh.sizes.length; i++) {
    const s = mesh.sizes[i]!;
    const c = coords[i]!;
    if (!Number.isInteger(c) || c < 0 || c >= s) {
      throw new LayoutError(`coordinate ${c} on axis ${mesh.axes[i]} is outside 0..${s - 1}`);
    }
    r = r * s + c;
  }
  return r;
}

/** The ranks that share every coordinate of `rank` except those on `axes` (sorted ascending): a process group. */
export function groupRanks(mesh: Mesh, rank: number, axes: readonly AxisName[]): number[] {
  const base = coordsOf(mesh, rank);
  const free = [...new Set(axes.map((a) => axisIndex(mesh, a)))].sort((a, b) => a - b);
  const out: number[] = [];
  const c = base.slice();
  const rec = (k: number): void => {
    if (k === free.length) {
      out.push(rankAt(mesh, c));
      return;
    }
    const ax = free[k]!;
    for (let v = 0; v < mesh.sizes[ax]!; v++) {
      c[ax] = v;
      rec(k + 1);
    }
  };
  rec(0);
  // Row-major enumeration with free axes in mesh order is already ascending; sort anyway for safety.
  return out.sort((a, b) => a - b);
}

/** All distinct groups of the mesh along `axes` (a partition of the ranks), ordered by their first rank. */
export function allGroups(mesh: Mesh, axes: readonly AxisName[]): Group[] {
  const seen = new Map<string, Group>();
  const n = meshSize(mesh);
  for (let r = 0; r < n; r++) {
    const g = makeGroup(groupRanks(mesh, r, axes));
    if (!seen.has(g.key)) seen.set(g.key, g);
  }
  return [...seen.values()];
}

/** A process group: a set of ranks. key = ranks.join(","). */
export interface Group {
  key: string;
  ranks: number[];
}

export function makeGroup(ranks: number[]): Group {
  const sorted = [...new Set(ranks)].sort((a, b) => a - b);
  for (const r of sorted) {
    if (!Number.isInteger(r) || r < 0) throw new LayoutError(`a group holds non-negative integer ranks; got ${r}`);
  }
  return { key: sorted.join(","), ranks: sorted };
}

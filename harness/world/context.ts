/**
 * Builds what one rank's subject instance sees: coordinates, process groups, ops and collectives.
 */
import type { ClipArgs, Exact, ParamView, RankContext, ReduceOp, Tensor } from "../subject/api.ts";
import type { LocalParam, Placement } from "../model/plan.ts";
import type { Backend } from "../backend/backend.ts";
import type { ValidLayout } from "../layout/layout.ts";
import { coordsOf, denseMesh, groupRanks, makeGroup, sparseMesh, SPARSE_ONLY_AXES, type AxisName, type Group, type Mesh, type MeshName } from "../layout/mesh.ts";
import type { World } from "./world.ts";
import { hardenHandedOut } from "../util/harden.ts";


export interface Meshes {
  dense: Mesh;
  sparse: Mesh;
}

export function meshesOf(layout: ValidLayout): Meshes {
  return { dense: denseMesh(layout), sparse: sparseMesh(layout) };
}

/** Axes of `mesh` without pp, in mesh order: the per-stage sub-mesh a parameter lives on. */
export function stageAxes(mesh: Mesh): AxisName[] {
  return mesh.axes.filter((a) => a !== "pp");
}

/**
 * A mesh by name (its whole stage sub-mesh: every axis but pp), or a parameter (anything with `mesh`
 * and `meshAxes`, e.g. a ParamView): the sub-mesh its DTensor lives on, whose axes may be a subset.
 */
export type MeshRef = MeshName | { readonly mesh: MeshName; readonly meshAxes: readonly AxisName[] };

/**
 * The group of ranks that differ from `rank` only on the flagged (or named) axes of a stage sub-mesh.
 * Boolean flags are aligned with the axes of `mesh`: a parameter's `meshAxes` when a parameter is
 * given, else every axis of the named mesh but pp. A flag list of another length is an error, never a
 * silent misalignment (a sub-mesh parameter's flags must come with the parameter).
 */
export function reductionGroup(meshes: Meshes, rank: number, mesh: MeshRef, axes: readonly boolean[] | readonly AxisName[]): Group {
  const name = typeof mesh === "string" ? mesh : mesh.mesh;
  const m = meshes[name];
  if (!m) throw new Error(`no mesh "${String(name)}" (dense or sparse)`);
  let named: AxisName[];
  if (axes.length > 0 && typeof axes[0] === "boolean") {
    const flags = axes as readonly boolean[];
    const over = typeof mesh === "string" ? stageAxes(m) : mesh.meshAxes;
    if (flags.length !== over.length) {
      throw new Error(
        `groupOf: ${flags.length} flags for the ${over.length} axes (${over.join(", ")}) of the ${name} ` +
          (typeof mesh === "string" ? "stage mesh; for a parameter on a sub-mesh pass the parameter: groupOf(p, flags)" : "parameter's sub-mesh"),
      );
    }
    named = over.filter((_, i) => flags[i]);
  } else {
    named = [...(axes as readonly AxisName[])];
  }
  for (const a of named) {
    if (!m.axes.includes(a)) throw new Error(`mesh ${name} has no axis "${a}" (axes: ${m.axes.join(", ")})`);
  }
  return makeGroup(groupRanks(m, rank, named));
}

/**
 * Whether a correct clip sums p's partials before its norm: p is Partial(sum) on some axis and its
 * Partial axes span more than this rank (on one rank the partial is the logical gradient).
 */
export function summedOverPartial(meshes: Meshes, rank: number, p: { mesh: MeshName; meshAxes: readonly AxisName[]; placements: readonly Placement[] }): boolean {
  if (!p.placements.some((x) => x.kind === "partial")) return false;
  return reductionGroup(meshes, rank, p, p.placements.map((x) => x.kind === "partial")).ranks.length > 1;
}

/**
 * The tie group of `p` on `rank` (RankContext.tieGroupOf): the ranks that differ from `rank` only on
 * pp and hold a copy of p's logical parameter with the same block.
 */
export function tieGroup(plan: readonly (readonly LocalParam[])[], meshes: Meshes, rank: number, p: Pick<ParamView, "name" | "fqn" | "tieGroup" | "block">): Group {
  if (!p.tieGroup) throw new Error(`tieGroupOf: ${p.fqn} is not a tied parameter`);
  const same = (a: { start: readonly number[]; len: readonly number[] }) => a.start.join() === p.block.start.join() && a.len.join() === p.block.len.join();
  const ranks = groupRanks(meshes.dense, rank, ["pp"]).filter((r) => plan[r]!.some((q) => q.name === p.name && same(q.block)));
  if (!ranks.includes(rank)) throw new Error(`tieGroupOf: rank ${rank} holds no copy of ${p.name} with block start [${p.block.start.join(", ")}]`);
  return makeGroup(ranks);
}

/** What a subject's clip is called with: the rank's copies, also split into logical copies and tied replicas. */
export function clipArgs(params: readonly ParamView[], opts: Pick<ClipArgs, "maxNorm" | "normType" | "errorIfNonfinite">): ClipArgs {
  return hardenHandedOut({ params, logical: params.filter((v) => v.canonical), replicas: params.filter((v) => !v.canonical), ...opts });
}

export function rankContext(
  rank: number,
  layout: ValidLayout,
  meshes: Meshes,
  world: World,
  backend: Backend,
  plan?: readonly (readonly LocalParam[])[],
): RankContext {
  const coords = {} as Record<AxisName, number>;
  for (const m of [meshes.dense, meshes.sparse]) {
    coordsOf(m, rank).forEach((c, i) => (coords[m.axes[i]] = c));
  }
  function allReduce(group: Group, value: number, op: ReduceOp): Promise<number>;
  function allReduce(group: Group, value: Exact, op: "sum"): Promise<Exact>;
  function allReduce(group: Group, value: number | Exact, op: ReduceOp): Promise<number | Exact> {
    return world.allReduce(rank, group, value, op);
  }
  // frozen before the subject sees it: a subject can rewrite nothing in it that another rank or the harness reads
  return hardenHandedOut({
    rank,
    world: world.size,
    layout,
    coords,
    group: (...axes: AxisName[]) => {
      const sparse = axes.some((a) => (SPARSE_ONLY_AXES as readonly AxisName[]).includes(a));
      return world.own(makeGroup(groupRanks(sparse ? meshes.sparse : meshes.dense, rank, axes)));
    },
    groupOf: (mesh, axes) => world.own(reductionGroup(meshes, rank, mesh, axes)),
    allReduce,
    allGather: (group: Group, t: Tensor, dim: number) => world.allGather(rank, group, t, dim),
    broadcast: (group, value, src) => world.broadcast(rank, group, value, src),
    barrier: (group) => world.barrier(rank, group),
    allReduceTensor: (group, t, op) => world.allReduceTensor(rank, group, t, op),
    broadcastTensor: (group, t, src) => world.broadcastTensor(rank, group, t, src),
    tieGroupOf: (p) => {
      if (!plan) throw new Error("tieGroupOf: this world was built without the plan of its ranks");
      return world.own(tieGroup(plan, meshes, rank, p));
    },
    ops: backend.opsFor(rank),
  } satisfies RankContext);
}

/**
 * A fuzz case: one cell whose model is synthetic. Instead of a built-in model name it carries its
 * parameters explicitly, each with the PP stage, mesh (dense or sparse), mesh axes (the whole stage
 * mesh or a sub-mesh of it) and placements of its canonical copy and of every tied replica.
 *
 * A case is plain JSON (the replay file is one), and it is turned into what `runCell` needs:
 * a ModelManifest (the logical parameters, for the reference) and a plan (each rank's LocalParams,
 * for the subjects and the checks). Nothing here is random: the arbitraries (arbitraries.ts) produce
 * cases, and replaying a case file builds exactly the same cell again.
 *
 * Semantics (documented choices):
 * - a copy's `axes` are axes of its mesh without pp, in mesh order (dense: dp_replicate, dp_shard,
 *   cp, tp; sparse: dp_replicate, efsdp, ep). A copy on a sub-mesh (fewer axes) is, like a DTensor
 *   on `world_mesh[...]` sub-mesh, one instance per slice of the missing axes: identical copies,
 *   i.e. Replicate on every stage axis it does not name;
 * - placements are aligned with `axes`; a dim sharded by several axes is split outer axis first,
 *   each split as torch.chunk does (uneven and empty chunks are normal): harness/model/plan.ts
 *   localBlock. Partial ("P") leaves the block whole: the ranks along the copy's Partial axes hold
 *   partials of the gradient, whose sum is the logical gradient (gradients/specs.ts: two generated
 *   partials and zeros); only an untied parameter may be Partial (a tie group's copies already hold
 *   the finalize regime's partials);
 * - every rank of a stage holds the stage's copies in the same order: canonical copies in manifest
 *   order, then replicas in manifest order;
 * - a replica lives on a stage other than its canonical copy's (a copy on the same stage would be
 *   the same tensor, as in plan.ts); at most one replica per stage.
 * - an optimizer-owned subject (shape "optimizer") finalizes a tied gradient itself, summing the
 *   copies that hold the same block over pp: its cases tie one replica on the last stage, placed as
 *   its canonical copy (same mesh, axes, placements) on an earlier stage (checkOptimizerCase);
 * - `steps` makes a training case: T steps of the `train` machinery (harness/training/train.ts),
 *   per-stage initialisation, on the case's layout against one rank holding every parameter whole
 *   (singleRankPlan), compared bitwise after the init sync and after every step.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import type { DType } from "../subject/api.ts";
import { REGIMES, type Regime } from "../gradients/regimes.ts";
import { InputError } from "../errors.ts";
import { formatLayout, parseLayout, validateLayout, worldSize, type Layout } from "../layout/layout.ts";
import { ALL_AXES, axisIndex, coordsOf, denseMesh, DENSE_STAGE_AXES, SPARSE_STAGE_AXES, sparseMesh, type AxisName, type Mesh, type MeshName } from "../layout/mesh.ts";
import { numel, type LogicalParam, type ModelManifest, type ParamKind } from "../model/manifest.ts";
import { localBlock, Partial, partialSlot, Replicate, Shard, type LocalParam, type Placement } from "../model/plan.ts";
import type { Cell } from "../cell/cell.ts";
import type { TrainResult } from "../training/train-parity.ts";
import { parseJsonText } from "../util/json-file.ts";
import { layoutFields } from "../layout/schema.ts";

/** The regimes a fuzz case may name: the sweep's, and `finalize` (tied copies' own partial gradients). */
export const FUZZ_REGIMES = [...REGIMES, "finalize"] as const satisfies readonly Regime[];

/** One rank: the layout a training case is compared against. */
const SINGLE_RANK = parseLayout("single");

/** The per-stage axes of each mesh, in mesh order (no pp). */
export const STAGE_MESH_AXES: Record<MeshName, readonly AxisName[]> = { dense: DENSE_STAGE_AXES, sparse: SPARSE_STAGE_AXES };

/** Where one physical copy lives and how it is placed. */
export interface FuzzCopy {
  stage: number;
  mesh: MeshName;
  axes: AxisName[];
  placements: Placement[];
}

export interface FuzzParam extends FuzzCopy {
  /** Logical (canonical) name: the generator key. */
  name: string;
  shape: number[];
  /** Tied copies on other stages (a tie group across stages when non-empty). */
  replicas: FuzzCopy[];
}

export interface FuzzCase {
  subject: string;
  layout: Layout;
  dtype: DType;
  normType: number;
  regime: Regime;
  seed: number;
  maxNorm?: number;
  errorIfNonfinite?: boolean;
  /** Training steps: the case is a training run (train.parity) instead of one clip. */
  steps?: number;
  params: FuzzParam[];
}

/** The most steps a training case may ask for (the arbitraries draw 2 or 3). */
export const MAX_TRAIN_STEPS = 10;

// ---- placements as short text: "R", "S(0)" -----------------------------------------------------

export function formatPlacement(p: Placement): string {
  return p.kind === "shard" ? `S(${p.dim})` : p.kind === "replicate" ? "R" : "P";
}

export function parsePlacement(text: string): Placement {
  if (text === "R") return Replicate;
  if (text === "P") return Partial;
  const m = /^S\((\d+)\)$/.exec(text);
  if (m) return Shard(Number(m[1]));
  throw new InputError(`placement "${text}" is not R, P or S(<dim>)`);
}

// ---- validation ---------------------------------------------------------------------------------

function checkCopy(c: FuzzCopy, shape: number[], pp: number, where: string): void {
  if (!Number.isInteger(c.stage) || c.stage < 0 || c.stage >= pp) throw new InputError(`${where}: stage ${c.stage} is outside 0..${pp - 1}`);
  const allowed = STAGE_MESH_AXES[c.mesh];
  if (!allowed) throw new InputError(`${where}: mesh "${String(c.mesh)}" is not dense or sparse`);
  let last = -1;
  for (const a of c.axes) {
    const i = allowed.indexOf(a);
    if (i < 0) throw new InputError(`${where}: axis "${a}" is not an axis of the ${c.mesh} stage mesh (${allowed.join(", ")})`);
    if (i <= last) throw new InputError(`${where}: axes [${c.axes.join(", ")}] must be distinct and in mesh order (${allowed.join(", ")})`);
    last = i;
  }
  if (c.placements.length !== c.axes.length) {
    throw new InputError(`${where}: ${c.placements.length} placements for ${c.axes.length} axes`);
  }
  for (const p of c.placements) {
    if (p.kind === "shard" && !(Number.isInteger(p.dim) && p.dim >= 0 && p.dim < shape.length)) {
      throw new InputError(`${where}: Shard(${p.dim}) of a tensor of shape [${shape.join(", ")}]`);
    }
  }
}

function checkSteps(c: FuzzCase): void {
  if (c.steps === undefined) return;
  if (!Number.isInteger(c.steps) || c.steps < 1 || c.steps > MAX_TRAIN_STEPS) {
    throw new InputError(`fuzz case steps: ${c.steps} must be an integer in [1, ${MAX_TRAIN_STEPS}]`);
  }
  // a training loop clips with the regime's max_norm and never raises (harness/training/train.ts)
  if (c.maxNorm !== undefined) throw new InputError(`fuzz case maxNorm: ${c.maxNorm} cannot be given with steps (a training case uses the regime's max_norm)`);
  if (c.errorIfNonfinite !== undefined) throw new InputError(`fuzz case errorIfNonfinite: ${c.errorIfNonfinite} cannot be given with steps (a training loop never raises)`);
}

/** Throws InputError naming the parameter and field when the case is not well formed. */
export function validateCase(c: FuzzCase): FuzzCase {
  const layout = validateLayout(c.layout);
  if (worldSize(layout) > 64) throw new InputError(`fuzz case: world ${worldSize(layout)} is larger than 64 ranks`);
  checkSteps(c);
  const names = new Set<string>();
  c.params.forEach((p, i) => {
    const where = `fuzz case param ${i} (${p.name})`;
    if (!/^[A-Za-z0-9_.]+$/.test(p.name)) throw new InputError(`${where}: name must match [A-Za-z0-9_.]+`);
    if (names.has(p.name)) throw new InputError(`${where}: duplicate name`);
    names.add(p.name);
    if (p.shape.length === 0 || p.shape.some((d) => !Number.isSafeInteger(d) || d < 1)) {
      throw new InputError(`${where}: shape [${p.shape.join(", ")}] must have 1+ dims of size >= 1`);
    }
    checkCopy(p, p.shape, layout.pp, where);
    const partial = [p, ...p.replicas].some(hasPartial);
    if (partial && p.replicas.length) throw new InputError(`${where}: Partial placement on a tied parameter (its copies' gradients are the finalize regime's partials)`);
    const stages = new Set([p.stage]);
    p.replicas.forEach((r, k) => {
      checkCopy(r, p.shape, layout.pp, `${where} replica ${k}`);
      if (stages.has(r.stage)) throw new InputError(`${where} replica ${k}: stage ${r.stage} already holds a copy`);
      stages.add(r.stage);
    });
  });
  return { ...c, layout };
}

const placedAs = (x: FuzzCopy) => JSON.stringify([x.mesh, x.axes, x.placements]);

/**
 * Throws InputError, naming the field and value, when a case cannot be run on an optimizer-owned
 * subject: its finalize sums a tied gradient over the copies holding the same block (one all_reduce
 * on the tie group), so a tied parameter is tied as trainers tie it: its one replica on the last stage
 * (what the synthetic manifest declares), after its canonical copy's, and placed like it.
 */
export function checkOptimizerCase(c: FuzzCase): void {
  const last = validateLayout(c.layout).pp - 1;
  c.params.forEach((p, i) => {
    if (p.replicas.length > 1) throw new InputError(`fuzz case params[${i}] (${p.name}): ${p.replicas.length} replicas; an optimizer-owned subject's cases tie one replica on the last stage`);
    p.replicas.forEach((r, k) => {
      const where = `fuzz case params[${i}] (${p.name}) replicas[${k}]`;
      if (placedAs(r) !== placedAs(p)) {
        throw new InputError(`${where}: placed on ${describeCopy(r)}, its canonical copy on ${describeCopy(p)}: an optimizer-owned subject finalizes over copies placed alike`);
      }
      if (r.stage !== last || p.stage >= last) {
        throw new InputError(`${where}: stage ${r.stage} (canonical copy on stage ${p.stage}): an optimizer-owned subject's replica sits on the last stage (${last}), after its canonical copy`);
      }
    });
  });
}

// ---- model and plan -----------------------------------------------------------------------------

function hasPartial(c: FuzzCopy): boolean {
  return c.placements.some((x) => x.kind === "partial");
}

/** The axes a param's gradient is Partial(sum) over (its canonical copy's; never a tied one). */
function partialAxes(p: FuzzParam): AxisName[] {
  return p.axes.filter((_, i) => p.placements[i]!.kind === "partial");
}

export function replicaFqn(p: FuzzParam, r: FuzzCopy): string {
  return `${p.name}.tied.s${r.stage}`;
}

function kindOf(p: FuzzParam): ParamKind {
  if (p.replicas.length) return "embedding";
  return p.mesh === "sparse" ? "expert" : "ffn";
}

/** A stable short hash of what the reference depends on: the logical params' names and shapes, and more (below). */
export function modelName(c: FuzzCase): string {
  const h = createHash("sha256");
  // what the reference depends on beyond names and shapes: in `finalize` a tied parameter's logical gradient
  // is the sum of its copies' partials, and a Partial gradient's is the sum of its partials
  h.update(JSON.stringify(c.params.map((p) => {
    const key: unknown[] = [p.name, p.shape];
    if (p.replicas.length) key.push(p.replicas.map((r) => replicaFqn(p, r)));
    if (hasPartial(p)) key.push("P");
    return key;
  })));
  return `fuzz-${h.digest("hex").slice(0, 12)}`;
}

export function fuzzManifest(c: FuzzCase): ModelManifest {
  const params: LogicalParam[] = c.params.map((p, index) => ({
    index,
    name: p.name,
    shape: p.shape.slice(),
    kind: kindOf(p),
    layer: null,
    tp: "replicate",
    ...(hasPartial(p) ? { partialOver: partialAxes(p) } : {}),
  }));
  return {
    name: modelName(c),
    nLayers: 0,
    params,
    ties: c.params
      .filter((p) => p.replicas.length)
      .map((p) => ({ canonical: p.name, replicas: p.replicas.map((r) => ({ fqn: replicaFqn(p, r), stage: "last" as const, tp: "replicate" as const })) })),
    totalParams: params.reduce((n, p) => n + numel(p.shape), 0),
    description: `synthetic model of ${params.length} parameters from the fuzzer`,
  };
}

function prod(xs: readonly number[]): number {
  return xs.reduce((a, b) => a * b, 1);
}

/** Each rank's physical copies: the plan runCell hands to the subjects and checks. */
export function fuzzPlan(c: FuzzCase): LocalParam[][] {
  const layout = validateLayout(c.layout);
  const meshes: Record<MeshName, Mesh> = { dense: denseMesh(layout), sparse: sparseMesh(layout) };
  const world = worldSize(layout);
  const out: LocalParam[][] = [];
  for (let rank = 0; rank < world; rank++) {
    const coords: Record<MeshName, number[]> = { dense: coordsOf(meshes.dense, rank), sparse: coordsOf(meshes.sparse, rank) };
    const stage = coords.dense[0]!;
    const local: LocalParam[] = [];
    const emit = (p: FuzzParam, index: number, copy: FuzzCopy, canonical: boolean): void => {
      const m = meshes[copy.mesh];
      const idx = copy.axes.map((a) => axisIndex(m, a));
      const sizes = idx.map((i) => m.sizes[i]!);
      const at = idx.map((i) => coords[copy.mesh][i]!);
      const block = localBlock(p.shape, copy.axes.slice(), copy.placements, sizes, at);
      const partial = partialSlot(copy.placements, sizes, at);
      local.push({
        fqn: canonical ? p.name : replicaFqn(p, copy),
        name: p.name,
        index,
        canonical,
        tieGroup: p.replicas.length ? p.name : null,
        kind: kindOf(p),
        layer: null,
        stage,
        mesh: copy.mesh,
        meshAxes: copy.axes.slice(),
        placements: copy.placements.map((x) => ({ ...x })),
        block,
        numel: prod(block.len),
        ...(partial ? { partial } : {}),
      });
    };
    c.params.forEach((p, i) => {
      if (p.stage === stage) emit(p, i, p, true);
    });
    c.params.forEach((p, i) => {
      for (const r of p.replicas) if (r.stage === stage) emit(p, i, r, false);
    });
    out.push(local);
  }
  return out;
}

/**
 * The plan of one rank holding every parameter whole (the layout of a training case's comparison):
 * each logical parameter once, canonical, still in its tie group when the case ties it.
 */
export function singleRankPlan(c: FuzzCase): LocalParam[][] {
  const whole = (p: FuzzParam): FuzzParam => ({ ...p, stage: 0, mesh: "dense", axes: DENSE_STAGE_AXES.slice(), placements: DENSE_STAGE_AXES.map(() => Replicate), replicas: [] });
  const tied = new Set(c.params.filter((p) => p.replicas.length).map((p) => p.name));
  const plan = fuzzPlan({ ...c, layout: SINGLE_RANK, params: c.params.map(whole) });
  return plan.map((params) => params.map((lp) => ({ ...lp, tieGroup: tied.has(lp.name) ? lp.name : null })));
}

/** The cell runCell runs (its model is the synthetic manifest's name). */
export function fuzzCell(c: FuzzCase): Cell {
  return {
    subject: c.subject,
    layout: validateLayout(c.layout),
    model: modelName(c),
    dtype: c.dtype,
    normType: c.normType,
    regime: c.regime,
    seed: c.seed,
    ...(c.maxNorm !== undefined ? { maxNorm: c.maxNorm } : {}),
    ...(c.errorIfNonfinite !== undefined ? { errorIfNonfinite: c.errorIfNonfinite } : {}),
  };
}

// ---- size: what "smaller" means -----------------------------------------------------------------

/** The size of a cell: ranks, logical params, logical elements, physical copies (replicas included). */
export interface CellSize {
  ranks: number;
  params: number;
  elements: number;
}

export function caseSize(c: FuzzCase): CellSize {
  return {
    ranks: worldSize(c.layout),
    params: c.params.length,
    elements: c.params.reduce((n, p) => n + numel(p.shape), 0),
  };
}

/** a is smaller than b: no more ranks, and strictly fewer logical params and elements. */
export function smallerThan(a: CellSize, b: CellSize): boolean {
  return a.ranks <= b.ranks && a.params < b.params && a.elements < b.elements;
}

// ---- the replay file ----------------------------------------------------------------------------

const placementText = z.string().transform((s, ctx) => {
  try {
    return parsePlacement(s);
  } catch (err) {
    ctx.addIssue({ code: "custom", message: (err as Error).message });
    return z.NEVER;
  }
});
const copySchema = z.strictObject({
  stage: z.number().int().nonnegative(),
  mesh: z.enum(["dense", "sparse"]),
  axes: z.array(z.enum(ALL_AXES.filter((a) => a !== "pp") as [AxisName, ...AxisName[]])),
  placements: z.array(placementText),
});
const paramSchema = copySchema.extend({
  name: z.string().min(1),
  shape: z.array(z.number().int().positive()).min(1),
  replicas: z.array(copySchema).default([]),
});
export const CASE_FILE_FORMAT = "clip-parity fuzz case v1";
const caseFileSchema = z.strictObject({
  format: z.literal(CASE_FILE_FORMAT),
  note: z.string().optional(),
  subject: z.string().min(1),
  layout: z.object(layoutFields),
  dtype: z.enum(["f32", "bf16", "f16"]),
  norm: z.union([z.number().positive(), z.literal("inf")]),
  regime: z.enum(FUZZ_REGIMES),
  seed: z.number().int().nonnegative(),
  steps: z.number().int().positive().optional(),
  maxNorm: z.number().positive().optional(),
  errorIfNonfinite: z.boolean().optional(),
  params: z.array(paramSchema),
});

/** The case as the JSON of a replay file (placements as "R" / "P" / "S(d)", one param per line). */
export function caseToFile(c: FuzzCase, note?: string): string {
  const copy = (x: FuzzCopy) => ({ stage: x.stage, mesh: x.mesh, axes: x.axes, placements: x.placements.map(formatPlacement) });
  const head = {
    format: CASE_FILE_FORMAT,
    ...(note ? { note } : {}),
    subject: c.subject,
    layout: c.layout,
    dtype: c.dtype,
    norm: c.normType === Infinity ? "inf" : c.normType,
    regime: c.regime,
    seed: c.seed,
    ...(c.steps !== undefined ? { steps: c.steps } : {}),
    ...(c.maxNorm !== undefined ? { maxNorm: c.maxNorm } : {}),
    ...(c.errorIfNonfinite !== undefined ? { errorIfNonfinite: c.errorIfNonfinite } : {}),
  };
  const params = c.params.map((p) =>
    JSON.stringify({ name: p.name, shape: p.shape, ...copy(p), ...(p.replicas.length ? { replicas: p.replicas.map(copy) } : {}) }),
  );
  const text = JSON.stringify(head, null, 2);
  return `${text.slice(0, -2)},\n  "params": [\n    ${params.join(",\n    ")}\n  ]\n}\n`;
}

/** Parses and validates a replay file's text; `where` names it in errors. */
export function caseFromFile(text: string, where: string): FuzzCase {
  const f = parseJsonText(caseFileSchema, text, where, "a valid fuzz case file");
  return validateCase({
    subject: f.subject,
    layout: f.layout,
    dtype: f.dtype,
    normType: f.norm === "inf" ? Infinity : f.norm,
    regime: f.regime,
    seed: f.seed,
    ...(f.steps !== undefined ? { steps: f.steps } : {}),
    ...(f.maxNorm !== undefined ? { maxNorm: f.maxNorm } : {}),
    ...(f.errorIfNonfinite !== undefined ? { errorIfNonfinite: f.errorIfNonfinite } : {}),
    params: f.params.map((p) => ({
      name: p.name,
      shape: p.shape,
      stage: p.stage,
      mesh: p.mesh,
      axes: p.axes as AxisName[],
      placements: p.placements,
      replicas: p.replicas.map((r) => ({ stage: r.stage, mesh: r.mesh, axes: r.axes as AxisName[], placements: r.placements })),
    })),
  });
}

/** Where a copy sits: `s1:dense[dp_shard=S(0),tp=R]`. */
function describeCopy(x: FuzzCopy): string {
  return `s${x.stage}:${x.mesh}[${x.axes.map((a, i) => `${a}=${formatPlacement(x.placements[i]!)}`).join(",")}]`;
}

/** One line describing the case, e.g. for test output. */
export function describeCase(c: FuzzCase): string {
  const s = caseSize(c);
  const norm = c.normType === Infinity ? "inf" : String(c.normType);
  const params = c.params.map((p) => `${p.name}[${p.shape.join("x")}]@${describeCopy(p)}${p.replicas.map((r) => ` tied ${describeCopy(r)}`).join("")}`).join("; ");
  const train = c.steps !== undefined ? ` train t${c.steps}` : "";
  return `${c.subject} ${formatLayout(c.layout)} ${c.dtype} n${norm} ${c.regime} s${c.seed}${train} (${s.ranks} ranks, ${s.params} params, ${s.elements} elements): ${params}`;
}

/** A property a case broke: its id (a check id, or a fuzz-only property) and why. */
export interface Violation {
  id: string;
  message: string;
}

/** A training case's outcome. */
export interface FuzzTrainOutcome {
  train: TrainResult;
  violations: Violation[];
}

/** How a case is run. */
export interface RunCaseOptions {
  /** The command line the check messages print to reproduce the case. */
  repro?: string;
  timeoutMs?: number;
}

/**
 * The subject API: what an implementation of distributed clipping sees on one rank.
 *
 * A subject is SPMD code. The harness runs one instance of `clip` per rank, concurrently; each
 * instance sees only its own rank: its mesh coordinates, its process groups, its local gradient
 * shards, the backend's ops and collectives that rendezvous across ranks like c10d.
 */
import type { AxisName, Group, MeshName } from "../layout/mesh.ts";
import type { ValidLayout } from "../layout/layout.ts";
import type { Block, Placement } from "../model/plan.ts";
import type { ParamKind } from "../model/manifest.ts";

export type DType = "f32" | "bf16" | "f16";
export type ToleranceClass = "exact" | "fp32" | "fp32-accum" | "bf16";
export type ReduceOp = "sum" | "max";
export type CollectiveKind = "all_reduce" | "all_gather" | "broadcast" | "barrier";

/** Per rank: calls and bytes of each collective kind, and calls per group. */
export interface CommRecord {
  calls: number;
  bytes: number;
  byKind: Record<CollectiveKind, { calls: number; bytes: number }>;
  /** Calls and bytes per process group (keyed by its ranks). */
  byGroup: Record<string, { calls: number; bytes: number }>;
}
/**
 * "clip" (default): torch.nn.utils.clip_grad_norm_ over every copy; the harness finalizes tied
 * gradients first (every copy holds the logical gradient). "optimizer": an optimizer-owned clipper
 * (torchtitan's MTP+PP trainer): it gets each copy's raw partial gradient, finalizes them itself
 * (a sum over the tie group) and clips `logical` by its own norm, then `replicas` by the same
 * coefficient (`clip_grads_with_norm_(replicas, max_norm, total_norm)`).
 */
export type SubjectShape = "clip" | "optimizer";

/** A tensor owned by the backend and charged to one rank's memory ledger. */
export interface Tensor {
  readonly id: number;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly numel: number;
  /** The rank whose ledger pays for it. */
  readonly rank: number;
}

/**
 * An exact partial sum of |g|^p: an integer `sum` worth sum * 2^-1074, plus the non-finite part
 * (0, +Infinity or NaN) that no integer can hold. Exact values add without rounding on any rank
 * in any order, so a norm reduced from them does not depend on the layout.
 */
export interface Exact {
  readonly sum: bigint;
  readonly nonfinite: number;
}

/** One physical copy of one logical parameter, as this rank holds it (like a DTensor's local view). */
export interface ParamView {
  /** Physical name: a tied replica has its own FQN. */
  readonly fqn: string;
  /** Canonical logical name (the tie group's canonical FQN for a replica). */
  readonly name: string;
  /** True for the canonical physical copy of the logical parameter; false for tied replicas. */
  readonly canonical: boolean;
  readonly tieGroup: string | null;
  readonly kind: ParamKind;
  readonly layer: number | null;
  readonly stage: number;
  /** "dense" or "sparse" (expert parameters live on the sparse mesh). */
  readonly mesh: MeshName;
  /** The parameter's mesh axes, without pp (each PP stage has its own sub-mesh, as in torchtitan). */
  readonly meshAxes: readonly AxisName[];
  readonly placements: readonly Placement[];
  readonly globalShape: readonly number[];
  /** This rank's local shard of the global tensor. */
  readonly block: Block;
  /** The local gradient shard, or null when the parameter has no gradient. Scale it in place. */
  readonly grad: Tensor | null;
  /** The parameter's local shard (float32 values) in training (`afterInit`, the train loop); absent in clip cells. */
  readonly param?: Tensor;
}

/** Backend ops on this rank's tensors. New tensors are charged to this rank. */
export interface Ops {
  /** Sum of |x|^p accumulated in float64 (p finite). */
  sumAbsPow(t: Tensor, p: number): number;
  /** Exact sum of float64(|x|^p). */
  exactSumAbsPow(t: Tensor, p: number): Exact;
  /** Max |x|; NaN when any element is NaN. */
  maxAbs(t: Tensor): number;
  nonFiniteCount(t: Tensor): number;
  /** x = round_to_dtype(float32(x) * float32(coef)), in place. */
  scale_(t: Tensor, coef: number): void;
  empty(dtype: DType, shape: readonly number[]): Tensor;
  clone(t: Tensor): Tensor;
  narrow(t: Tensor, dim: number, start: number, length: number): Tensor;
  cat(ts: readonly Tensor[], dim: number): Tensor;
  copy_(dst: Tensor, src: Tensor): void;
  free(t: Tensor): void;
  exactZero(): Exact;
  exactAdd(a: Exact, b: Exact): Exact;
  /** The exact value rounded once to float64. */
  exactToNumber(x: Exact): number;
}

/** What `clip` is called with: the arguments of torch.nn.utils.clip_grad_norm_. */
export interface ClipArgs {
  /** Every physical parameter copy on this rank, with or without a gradient. */
  readonly params: readonly ParamView[];
  readonly maxNorm: number;
  /** 2, 1, Infinity or any other p > 0. */
  readonly normType: number;
  readonly errorIfNonfinite: boolean;
  /**
   * The copies the norm is computed over: the canonical copy of every logical parameter on this
   * rank (`params` without tied replicas).
   */
  readonly logical: readonly ParamView[];
  /** The tied replicas on this rank (`params` that are not canonical): scaled, never counted. */
  readonly replicas: readonly ParamView[];
}

/** What `afterInit` is called with: every physical copy on this rank, `param` set. */
export interface InitArgs {
  readonly params: readonly ParamView[];
}

/** One rank of the simulated world, as a subject sees it. */
export interface RankContext {
  readonly rank: number;
  readonly world: number;
  readonly layout: ValidLayout;
  /** This rank's coordinate on every axis of both meshes. */
  readonly coords: Readonly<Record<AxisName, number>>;
  /** The group of ranks that differ from this one only on `axes` (efsdp/ep refer to the sparse mesh). */
  group(...axes: AxisName[]): Group;
  /**
   * The group a parameter reduces over: the ranks that differ from this one only on the mesh axes
   * flagged true, or named. Flags are aligned with the parameter's `meshAxes` when the parameter is
   * passed (`groupOf(p, flags)`: right for sub-mesh parameters too), or with every non-pp axis of the
   * named mesh (`groupOf(p.mesh, flags)`: a flag list of another length throws).
   */
  groupOf(mesh: MeshName | { readonly mesh: MeshName; readonly meshAxes: readonly AxisName[] }, axes: readonly boolean[] | readonly AxisName[]): Group;
  allReduce(group: Group, value: number, op: ReduceOp): Promise<number>;
  allReduce(group: Group, value: Exact, op: "sum"): Promise<Exact>;
  /** Gathers every member's tensor (group rank order) into one new tensor, concatenated on `dim`. */
  allGather(group: Group, t: Tensor, dim: number): Promise<Tensor>;
  broadcast(group: Group, value: number, srcRank: number): Promise<number>;
  barrier(group: Group): Promise<void>;
  /**
   * dist.all_reduce of a tensor, in place: every member's tensor becomes the float32 sum of all
   * members' tensors, added in group rank order and rounded once to the dtype (same dtype and shape
   * on every member). "sum" only.
   */
  allReduceTensor(group: Group, t: Tensor, op: "sum"): Promise<void>;
  /** dist.broadcast of a tensor, in place: every member's tensor becomes a copy of `srcRank`'s. */
  broadcastTensor(group: Group, t: Tensor, srcRank: number): Promise<void>;
  /**
   * The tie group of a tied parameter's copy: the ranks (this one included, ascending, so stage
   * order) that hold a copy of the same logical parameter with the same local block, one per stage
   * holding a copy: the group its gradients are finalized and its initial values synchronized on.
   * A group of one rank when the copies are one tensor (pp = 1); an error for an untied parameter.
   */
  tieGroupOf(p: ParamView): Group;
  readonly ops: Ops;
}

export interface Subject {
  name: string;
  /** One line: what it models. */
  description: string;
  /** The tolerance class it claims (SPEC §6); default "fp32". */
  tolerance?: ToleranceClass;
  /** For known-bad subjects: the check ids that must catch it (`train.parity`: the train check). */
  catchBy?: readonly string[];
  /** "clip" (default) or "optimizer": see SubjectShape. */
  shape?: SubjectShape;
  /**
   * Training only: called on every rank right after the parameters are initialised (each PP stage
   * from its own seed, as a PP trainer does), before the first step: where a trainer synchronizes
   * tied copies from the canonical one.
   */
  afterInit?(rank: RankContext, args: InitArgs): Promise<void>;
  /** Scale the gradients in place and return the total norm (as float32, in a JS number). */
  clip(rank: RankContext, args: ClipArgs): Promise<number>;
  /**
   * A subject that runs outside this process (the PyTorch adapter, `torch:<module>:<function>`): when
   * present, the cell calls it once with every rank's views instead of running `clip` on the simulated
   * world. It must leave each rank's clipped gradients in the views' tensors and report per rank.
   */
  external?(cell: ExternalCell): Promise<ExternalRun>;
}

/**
 * What an external subject may do with the cell's tensors (the backend, seen through the calls a
 * subject in another process needs): write them to a file, read its results back, free those.
 */
export interface TensorFiles {
  /** The meta backend holds shapes only, no values to hand over. */
  readonly isMeta: boolean;
  saveSafetensors(path: string, entries: { name: string; tensor: Tensor }[], metadata: Record<string, string>): void;
  loadSafetensors(path: string, rank: number): { name: string; tensor: Tensor }[];
  opsFor(rank: number): Ops;
  free(t: Tensor): void;
}

/** Everything an external subject gets: one cell, all ranks at once. */
export interface ExternalCell {
  readonly cell: {
    readonly subject: string;
    readonly model: string;
    readonly dtype: DType;
    readonly normType: number;
    readonly regime: string;
    readonly seed: number;
  };
  readonly layout: ValidLayout;
  readonly world: number;
  /** Index = rank: every physical copy the rank holds, gradients filled (null when absent). */
  readonly params: readonly (readonly ParamView[])[];
  readonly maxNorm: number;
  readonly normType: number;
  readonly errorIfNonfinite: boolean;
  /** The cell's tensors: save/load the gradients through them; free whatever it loads. */
  readonly backend: TensorFiles;
  readonly timeoutMs?: number;
}

/** What an external subject reports: like the simulated world's result, plus its own measurements. */
export interface ExternalRun {
  /** Index = rank: the returned norm, or the exception it raised. */
  ranks: { rank: number; value?: number; error?: Error }[];
  /** A hang, a timeout or a crash of the external runtime (fails the liveness check), or null. */
  liveness: string | null;
  comm: CommRecord[];
  /**
   * Per rank, the ranks whose data can have reached it through the collectives that ran (comm.reach); absent
   * where the runtime cannot tell, and comm.reach is then skipped.
   */
  reach?: number[][];
  /** Per rank, measured by the external runtime (the backend ledger does not see its memory). */
  memory?: { scratchPeakBytes: number; leakedBytes: number }[];
  /** The tolerance class the subject claims for this cell, when it depends on the cell (e.g. its dtype). */
  tolerance?: ToleranceClass;
  /**
   * Per rank, the scratch budget the subject's declared design sets (a framework file's `scratch`), with its
   * rule in words; a matrix's own budget overrides it.
   */
  scratchBudget?: { bytes: number[]; rule: string };
  /**
   * Why the subject cannot be asked this cell at all (e.g. its clip takes no norm_type): every check is
   * then skipped with this reason, never judged from the errors a stub raised (an n/a cell that asks for
   * an error on a non-finite norm would "pass" errors.nonfinite).
   */
  notApplicable?: string;
}

/** Raised by a subject when error_if_nonfinite is set and the total norm is not finite. */
export class NonFiniteNormError extends Error {
  constructor(normType: number, norm: number) {
    super(
      `The total norm of order ${normType} for gradients is non-finite (${norm}), so it cannot be clipped. ` +
        "To disable this error and scale the gradients by the non-finite norm anyway, set " +
        "`error_if_nonfinite=False`",
    );
    this.name = "NonFiniteNormError";
  }
}

/** Identity with types: a subject module's default export. */
export function defineSubject(subject: Subject): Subject {
  return subject;
}

// Part of the subject API; defined with the other float rules that subjects and checks share.
export { clipCoefficient, normFromPowerSum } from "../numerics/numerics.ts";

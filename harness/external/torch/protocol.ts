/**
 * The protocol between the harness and the PyTorch adapter (adapters/torch/adapter.py). This comment is
 * its one description; adapter.py mirrors PROTOCOL_VERSION and refuses a job of another version.
 *
 * A session is one `torchrun --standalone --nproc-per-node W adapter.py serve SESSION_DIR` (one process per
 * rank) serving one cell after another through files in SESSION_DIR (under /dev/shm when there is one):
 *
 *   ready-R.json             rank R is up: `readySchema` (its protocol version, pid, torch version, backend,
 *                            device). The harness refuses a session whose version differs from its own.
 *   rank-R.secret            the name of rank R's private folder P_R (128 random bits), written before torchrun
 *                            starts; rank R reads and deletes it at start-up, and no rank loads target code
 *                            before every rank has (a barrier on the adapter's own group). SESSION_DIR is then
 *                            mode 0300 (nobody lists it), so a target finds no other rank's files in a folder
 *                            it can list or name.
 *   P_R/in-N.safetensors     rank R's local gradient shards for cell N, named by physical FQN, written by the
 *                            native store before the job file, and the clipped ones after it: the adapter maps
 *                            the file shared and the gradients are clipped in it (no copy in, none out); a
 *                            gradient the target replaced is copied into it, and one of another dtype or shape
 *                            makes the adapter write the file anew, as returned, for the harness to refuse.
 *                            The harness copies them back into the cell's tensors so that the ordinary checks
 *                            judge them.
 *   P_R/job-N.json           `jobSchema`, written last and atomically (temp file + rename): a clip job (the
 *                            cell, the rank's physical copies and how to call the target: `conventionSchema`)
 *                            or `{"protocol": V, "kind": "quit"}`, which ends the session.
 *   P_R/result-N.json        `resultSchema`, written last and atomically: the returned norm (non-finite values
 *                            as "NaN"/"Infinity"/"-Infinity": JSON has none) or the exception, the collectives
 *                            issued (per call: op, kind, group ranks, bytes; on every process group of the
 *                            process, those a target made itself included), scratch memory (the allocator's
 *                            and the operating system's), the convention path taken and timings.
 *                            `adapterError` marks a failure of the adapter itself (a bad job, a protocol
 *                            mismatch, a mesh that cannot be built), not of the target.
 *
 * Per job every rank: builds (or reuses, for the same layout) the dense mesh (pp, dp_replicate, dp_shard, cp,
 * tp) and the sparse mesh (pp, dp_replicate, efsdp, ep) over the same ranks, row-major (SPEC §3), each
 * parameter living on its stage's sub-mesh without pp, trimmed to the axes of size > 1 (as torchtitan's
 * ParallelDims builds them; the sparse mesh keeps `ep`, a dense mesh with no axis left keeps `dp_shard`);
 * builds every physical copy as `DTensor.from_local` of its own shard (uneven shards exactly as planned) with
 * a gradient of the same placements; calls the convention's path; records collectives with a CommDebugMode
 * subclass and scratch memory (CUDA: the allocator's peak; CPU: storages created by tensor ops during the
 * call); leaves the clipped gradients in in-R and writes result-R, whose `groupCalls` counts every collective the rank issued per group
 * (the target's and the adapter's own full_tensor() of a returned DTensor). Meshes live as long as the session:
 * DTensor caches sharding decisions by mesh value, so a mesh rebuilt for the same layout would be handed
 * specs naming destroyed groups. Instead, when the members of some group issued different numbers of
 * collectives (a target that raised half-way on some ranks), or a rank failed in the adapter, the harness
 * ends the session after reading the results, and the next cell starts a fresh one.
 *
 * A hang is seen by the ranks themselves: while the target runs, every group of the cell's meshes (and the
 * default group) has c10d's timeout set to the job's `collectiveTimeoutS`, so a rank waiting that long in one
 * collective raises c10d's own "Timed out waiting" error, which the harness reports as a liveness failure;
 * the groups get the session's long timeout back afterwards (building meshes may legitimately take longer).
 * The harness kills the session (torchrun's process group and every rank by the pid it reported) after a
 * cell times out (a rank stuck outside any collective), after torchrun exits (a crash), when the session is
 * replaced and at exit. A rank
 * whose torchrun died exits by itself (PR_SET_PDEATHSIG, and a parent check while it waits for a job).
 *
 * Version history: 1 (implicit, never written) the prose protocol of issue 7; 2 adds the version, `kind`,
 * the call convention, `countedHere`, the result's `path` and `groupCalls`; 3 adds the job's `collectiveTimeoutS` and
 * clips in the `grads` file (the job's `out` is gone); 4 moves each rank's files into its private folder and
 * adds the result's `memory.osScratchBytes`.
 */
import { readFileSync } from "node:fs";
import { z } from "zod";
import { LAYOUT_AXES } from "../../layout/layout.ts";
import { layoutFields } from "../../layout/schema.ts";
import { issuePath } from "../../util/json-file.ts";

export const PROTOCOL_VERSION = 4;

/** module:qualname, e.g. torch.nn.utils:clip_grad_norm_ or transformers.trainer:Trainer._mixed_mesh_grad_norm */
export const TARGET_RE = /^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$/;
const IDENT_RE = /^[A-Za-z_]\w*$/;

/**
 * What a call's argument is made of, on the calling rank. Each name is derived from the cell the way the
 * framework's trainer derives it; a framework file says which it passes, and where (adapters/torch/frameworks/).
 */
export const ARG_SOURCES = {
  params:
    "every physical parameter copy on the rank: nn.Parameter DTensors on the framework's meshes (its support module's MESHES) or the " +
    "cell's, plain tensors on one rank; .grad set or None",
  model: "an nn.Module whose parameters() and named_parameters() yield those parameters, named by physical FQN",
  grads: "the gradients of the parameters that have one (DTensors)",
  local_params: "plain-tensor parameters over the rank's local shards, .grad the local gradient (for frameworks that never see a DTensor)",
  grads_for_norm:
    "the local gradients a Megatron optimizer counts in the norm: canonical copies only (param_is_not_shared), and a shard replicated " +
    "over some axes only on the rank at coordinate 0 of each of them (param_is_not_tensor_parallel_duplicate, generalised)",
  local_grads: "the local gradients of local_params, every copy that has one (plain tensors, scaled in place)",
  mpu:
    "a Megatron-style model-parallel unit over the layout (what Megatron-DeepSpeed passes to deepspeed.initialize): model parallel " +
    "= pp x tp, tensor = tp, pipeline = pp, data = dp_replicate x dp_shard x cp; get_<kind>_parallel_{group,rank,world_size}",
  grads_for_norm_deepspeed:
    "the local gradients DeepSpeed's BF16_Optimizer.get_grads_for_norm counts, by its own predicates: not a pipeline tied replica " +
    "(ds_pipe_replicated), and tensor-parallel rank 0 or is_model_parallel_parameter (local_params carry tensor_model_parallel)",
  fsdp1_module:
    "a root FSDP1 FullyShardedDataParallel over a module tree of the rank's parameters, each transformer block its own instance by " +
    "transformer_auto_wrap_policy (use_orig_params=False; FULL_SHARD over dp_shard, HYBRID_SHARD over dp_replicate x dp_shard, NO_SHARD " +
    "over dp_replicate or one rank), lazily initialised, each FlatParameter's .grad the rank's shard of its flattened gradients as its " +
    "reduce-scatter leaves it; the clipped shards are copied back into the cell's own local shards for the checks (adapters/torch/support/fw_torch_fsdp1.py)",
  zero_optimizer:
    "DeepSpeed's ZeRO stage 1/2 optimizer (DeepSpeedZeroOptimizer) of an engine deepspeed.initialize builds for the cell (gradient_clipping " +
    "= max_norm, SGD(lr=0) inside) over the parameters, each whole over the data-parallel axes and split over tp (tensor_model_parallel; " +
    "the layout's mpu passed, as Megatron-DeepSpeed does): dp_replicate x dp_shard x cp is its data-parallel group; its " +
    "averaged_gradients the rank's partition of the reduced gradients as the end of backward leaves them at the accumulation boundary",
  zero_grad_partitions:
    "the flat float32 gradient partitions of zero_optimizer, one per parameter group, as its step() builds them from averaged_gradients " +
    "before unscale_and_clip_grads; the clipped partitions are gathered and copied back into the cell's own local shards for the checks",
  torchrec_optimizer:
    "torchrec's GradientClippingOptimizer (clipping=NORM, max_gradient = max_norm, norm_type the cell's, the documented string \"inf\" " +
    "for the inf-norm, enable_global_grad_clip=True) over a KeyedOptimizerWrapper of the parameters (SGD(lr=0) inside), its " +
    "param_to_pgs mapping each parameter sharded over some mesh dimensions of more than one rank to those dimensions' process groups " +
    "(what 2D/n-D model parallelism hands torchrec), replicated-only and plain parameters left out (torchrec treats them as replicated; " +
    "adapters/torch/support/fw_torchrec.py)",
  deepspeed_engine:
    "DeepSpeed's engine with bf16 and no ZeRO (deepspeed.initialize, gradient_clipping = max_norm, SGD(lr=0) the client optimizer) over " +
    "a module of bf16 parameters shaped as the rank's whole gradients, whose loss has exactly the cell's gradients; one whole step " +
    "(engine(batch), engine.backward, engine.step) and the next step's forward and backward done: what is left is engine.step(). The client " +
    "optimizer's step copies the float32 gradients it is handed into the cell's gradients (adapters/torch/support/fw_deepspeed_engine.py)",
  max_norm: "the cell's max_norm (float)",
  norm_type: "the cell's norm type (float; math.inf for inf)",
  error_if_nonfinite: "the cell's error_if_nonfinite (bool)",
  foreach: "TorchOptions.foreach (CLIP_PARITY_TORCH_FOREACH); the argument is left out while it is unset",
  pp_mesh: "the 1-D pp DeviceMesh when pp > 1, else None (torchtitan: parallel_dims.get_optional_mesh('pp'))",
  world_group: "the default process group (Megatron's distributed optimizer reduces grad stats over the whole world)",
  ep_enabled: "layout.ep > 1 (torchtitan: ParallelDims.ep_enabled)",
  experts_present: "true when the cell has expert parameters on any rank: the harness's own rule, experts always on a mesh of their own",
  dist_backend: "the session's c10d backend: gloo or nccl",
} as const;
export type ArgSource = keyof typeof ARG_SOURCES;

const json: z.ZodType<unknown> = z.union([z.boolean(), z.number(), z.string(), z.null()]);

export const argSchema = z.union([
  z.enum(Object.keys(ARG_SOURCES) as [ArgSource, ...ArgSource[]]),
  z.strictObject({ const: json }),
  z.strictObject({ result: z.string().regex(IDENT_RE) }),
]);
export type Arg = z.infer<typeof argSchema>;

const target = z.string().regex(TARGET_RE, "expected module:qualname, e.g. torch.nn.utils:clip_grad_norm_");

export const callSchema = z.strictObject({
  target,
  /**
   * How a method gets its `self`: "none" (a plain function), "unused" (an unbound method whose body never
   * reads self, called with None), an instance built once per session from a factory, or {"arg": source}: the
   * object an argument source builds for the cell alone (ZeRO's optimizer, whose state is the cell's gradients;
   * torchrec's GradientClippingOptimizer over the cell's parameters).
   */
  receiver: z
    .union([
      z.literal("none"),
      z.literal("unused"),
      z.strictObject({ factory: target, kwargs: z.record(z.string().regex(IDENT_RE), argSchema).default({}) }),
      z.strictObject({ arg: z.enum(["zero_optimizer", "torchrec_optimizer", "deepspeed_engine"]) }),
    ])
    .default("none"),
  args: z.array(argSchema).default([]),
  kwargs: z.record(z.string().regex(IDENT_RE), argSchema).default({}),
  /** Passed only when the target's signature names the parameter (the plain torch:<module>:<function> convention). */
  ifNamed: z.record(z.string().regex(IDENT_RE), argSchema).default({}),
  /** Keeps the return value for a later step ({"result": name}). */
  saveAs: z.string().regex(IDENT_RE).optional(),
  /** Where the framework's own code makes this call, and why each argument is what it is. */
  why: z.string().optional(),
});
export type Call = z.infer<typeof callSchema>;

export const pathSchema = z.strictObject({
  name: z.string().regex(/^[a-z][\w-]*$/),
  /** "always", or a predicate of the framework's own applied to the rank's gradients (first true path wins). */
  when: z.union([z.literal("always"), z.strictObject({ predicate: target, over: z.literal("grads"), why: z.string() })]),
  steps: z.array(callSchema).min(1),
  /** The norm is what the last step returns, or a result saved by an earlier step. */
  norm: z.union([z.literal("return"), z.strictObject({ result: z.string().regex(IDENT_RE) })]).default("return"),
});

const normType = z.union([z.number().positive(), z.literal("inf")]);

export const conventionSchema = z.strictObject({
  /** Why the convention is what it is (JSON has no comments). */
  $comment: z.string().optional(),
  paths: z.array(pathSchema).min(1),
  /** Calls made once per session before the first job (e.g. deepspeed.init_distributed). */
  setup: z.array(callSchema).default([]),
  /**
   * Where expert parameters live. "own-mesh": always on the sparse mesh (the harness's layout, SPEC §4).
   * "dense-mesh-when-ep1": on the stage's dense mesh when ep = 1, as torchtitan shards them then (its
   * expert FSDP mesh is only built when ParallelDims.ep_enabled); their efsdp split then runs over the
   * dense axes dp_shard, cp, tp, which hold the same ranks in the same order.
   */
  experts: z.enum(["own-mesh", "dense-mesh-when-ep1"]).default("own-mesh"),
  /**
   * The mesh axes over which the adapter can build the convention's inputs (FSDP1's flat parameters: dp_replicate and
   * dp_shard); a cell with another axis > 1 is not applicable. Unset: any.
   */
  axes: z.array(z.enum(LAYOUT_AXES)).optional(),
  /** The norm types the framework's clip can be asked for; other cells are not applicable. */
  normTypes: z.union([z.literal("any"), z.array(normType).min(1)]).default("any"),
  /** The gradient dtypes the adapter can build the convention's inputs in (an engine built for one precision); unset: any. */
  dtypes: z.array(z.enum(["f32", "bf16", "f16"])).optional(),
});
export type Convention = z.infer<typeof conventionSchema>;

const layoutSchema = z.strictObject(layoutFields);

const placementSchema = z.discriminatedUnion("kind", [
  z.strictObject({ kind: z.literal("shard"), dim: z.number().int().nonnegative() }),
  z.strictObject({ kind: z.literal("replicate") }),
  z.strictObject({ kind: z.literal("partial") }),
]);

const nonneg = z.number().int().nonnegative();

export const jobParamSchema = z.strictObject({
  fqn: z.string(),
  name: z.string(),
  canonical: z.boolean(),
  tieGroup: z.string().nullable(),
  mesh: z.enum(["dense", "sparse"]),
  meshAxes: z.array(z.string()),
  placements: z.array(placementSchema),
  globalShape: z.array(nonneg),
  block: z.strictObject({ start: z.array(nonneg), len: z.array(nonneg) }),
  hasGrad: z.boolean(),
  /** This rank's shard is the one copy counted (see ARG_SOURCES.grads_for_norm). */
  countedHere: z.boolean(),
});
export type JobParam = z.infer<typeof jobParamSchema>;

export const clipJobSchema = z.strictObject({
  protocol: z.literal(PROTOCOL_VERSION),
  kind: z.literal("clip"),
  /** What the job runs, for messages: the subject spec. */
  subject: z.string(),
  rank: nonneg,
  world: z.number().int().positive(),
  layout: layoutSchema,
  dtype: z.enum(["f32", "bf16", "f16"]),
  maxNorm: z.number().positive(),
  normType,
  errorIfNonfinite: z.boolean(),
  foreach: z.boolean().nullable(),
  /** c10d's timeout for the target's collectives, in seconds: how long a rank waits for a peer before calling it a hang. */
  collectiveTimeoutS: z.number().positive(),
  convention: conventionSchema,
  grads: z.string(),
  result: z.string(),
  params: z.array(jobParamSchema),
});
export type ClipJob = z.infer<typeof clipJobSchema>;

export const quitJobSchema = z.strictObject({ protocol: z.literal(PROTOCOL_VERSION), kind: z.literal("quit") });

export const jobSchema = z.discriminatedUnion("kind", [clipJobSchema, quitJobSchema]);
export type Job = z.infer<typeof jobSchema>;

export const readySchema = z.strictObject({
  protocol: z.number().int(),
  rank: nonneg,
  pid: z.number().int().positive(),
  torch: z.string(),
  backend: z.string(),
  device: z.string(),
});
export type Ready = z.infer<typeof readySchema>;

const tally = z.strictObject({ calls: nonneg, bytes: nonneg });

export const resultSchema = z.strictObject({
  protocol: z.literal(PROTOCOL_VERSION),
  rank: nonneg,
  norm: z.union([z.number(), z.enum(["NaN", "Infinity", "-Infinity"]), z.null()]),
  normDtype: z.string().optional(),
  error: z.strictObject({ type: z.string(), message: z.string(), traceback: z.array(z.string()) }).nullable(),
  adapterError: z.boolean().optional(),
  /** The convention path this rank took (null when the adapter failed before choosing). */
  path: z.string().nullable(),
  comm: z
    .strictObject({
      calls: nonneg,
      bytes: nonneg,
      byKind: z.record(z.string(), tally),
      byGroup: z.record(z.string(), tally),
      ops: z.array(z.strictObject({ op: z.string(), kind: z.string(), group: z.string(), bytes: nonneg })),
    })
    .optional(),
  memory: z
    .strictObject({
      scratchPeakBytes: nonneg,
      leakedBytes: z.number().int(),
      method: z.string(),
      /** The resident high-water mark during the call less the larger of the resident size before it plus the mapped shards and the resident size after it (Linux). */
      osScratchBytes: nonneg.optional(),
    })
    .optional(),
  /** Collectives per group ("0,2") this rank issued during the job, target and adapter together. */
  groupCalls: z.record(z.string(), nonneg).optional(),
  gradsMissing: z.array(z.string()).optional(),
  kwargs: z.array(z.string()).optional(),
  timings: z.record(z.string(), z.number()).optional(),
});
export type Result = z.infer<typeof resultSchema>;

function issues(e: z.ZodError): string {
  return e.issues
    .slice(0, 4)
    .map((i) => `${issuePath(i.path)}: ${i.message}`)
    .join("; ");
}

/** A file the adapter wrote, validated; an Error naming the file and the first differences otherwise. */
export function readProtocolFile<T>(schema: z.ZodType<T>, path: string): T {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new Error(`${path}: ${(err as Error).message}`);
  }
  const version = (raw as { protocol?: unknown } | null)?.protocol;
  if (version !== undefined && version !== PROTOCOL_VERSION) {
    throw new Error(
      `${path}: the adapter speaks protocol ${String(version)}, this harness ${PROTOCOL_VERSION}: adapters/torch/adapter.py and ` +
        "harness/external/torch/protocol.ts come from different versions of clip-parity",
    );
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new Error(`${path} does not follow protocol ${PROTOCOL_VERSION}: ${issues(parsed.error)}`);
  return parsed.data;
}

/** A job checked against the schema before it is written: a harness bug shows here, not as an adapter error. */
export function checkJob(job: Job): Job {
  const parsed = jobSchema.safeParse(job);
  if (!parsed.success) throw new Error(`internal: a torch job does not follow protocol ${PROTOCOL_VERSION}: ${issues(parsed.error)}`);
  return parsed.data;
}

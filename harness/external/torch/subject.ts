/**
 * `torch:` subjects: a real Python clipping function run by the PyTorch adapter under torchrun, one process
 * per rank, on the cell's gradients as DTensors, judged by the same checks as a built-in subject.
 *
 *   torch:<module>:<function>   any importable function, called as clip_grad_norm_ is (frameworks.ts:
 *                               plainConvention), e.g. torch:torch.nn.utils:clip_grad_norm_
 *   torch:<framework>           a framework declared in adapters/torch/frameworks/<framework>.json, called
 *                               the way its trainer calls it, e.g. torch:torchtitan, torch:transformers
 *
 * This module parses specs, probes the interpreter (torch and the target must import before anything
 * runs: exit 2 otherwise), sets the tolerance policy and turns one cell into one job per rank; session.ts
 * runs the jobs, protocol.ts describes them.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { InputError } from "../../errors.ts";
import { axisIndex, coordsOf, meshOf, type AxisName } from "../../layout/mesh.ts";
import type { ValidLayout } from "../../layout/layout.ts";
import { DEFAULT_SCRATCH_SLACK_BYTES } from "../../cell/cell.ts";
import type { ReadsVerdict } from "../../results/types.ts";
import type { CollectiveKind, CommRecord, DType, ExternalCell, ExternalRun, ParamView, Subject, Tensor, ToleranceClass } from "../../subject/api.ts";
import { applicability, FRAMEWORK_NAME_RE, getFramework, outsideConfigurations, plainConvention, type Framework } from "./frameworks.ts";
import { ADAPTER, SETUP_HINT, torchOptionsFromEnv, type TorchOptions } from "./options.ts";
import { PROTOCOL_VERSION, TARGET_RE, type ClipJob, type Convention, type JobParam, type Result } from "./protocol.ts";
import { environmentFor, NODEPS_REQUIREMENTS, normalizeName, PINNED_REQUIREMENTS, requirementPins, specPins, type Pin, type ReleaseEnvironment } from "./environments.ts";
import { AdapterStartError, groupsOutOfStep, pythonPath, sessionFor, type JobOutcome, type TorchSession } from "./session.ts";
import { causeVerdict, isCollectiveTimeout } from "../causes.ts";

export { closeTorchSessions } from "./session.ts";
export { PROJECT_ROOT } from "./options.ts";

export type TorchSpec = (
  | { kind: "function"; spec: string; module: string; fn: string; target: string }
  | { kind: "framework"; spec: string; framework: string }
) & {
  /** Releases pinned after `@` (`torch:deepspeed@deepspeed==0.19.6,torch==2.9.1`): run in their own environment (environments.ts). */
  pins: Pin[];
};

const FUNCTION_SPEC = /^torch:([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$/;

/**
 * `torch:<module>:<function>` or `torch:<framework>`, optionally `@PKG==VER[,PKG==VER...]` -> its parts;
 * InputError on anything else.
 */
export function parseTorchSpec(spec: string): TorchSpec {
  const { head, pins } = specPins(spec);
  const m = FUNCTION_SPEC.exec(head);
  if (m) return { kind: "function", spec, module: m[1]!, fn: m[2]!, target: `${m[1]}:${m[2]}`, pins };
  const name = head.startsWith("torch:") ? head.slice("torch:".length) : "";
  if (FRAMEWORK_NAME_RE.test(name) && !name.includes(":")) return { kind: "framework", spec, framework: name, pins };
  throw new InputError(
    `subject "${spec}": a PyTorch subject is torch:<module>:<function>, e.g. torch:torch.nn.utils:clip_grad_norm_ ` +
      "(module: a dotted Python module path; function: a name in it), or torch:<framework>, e.g. torch:torchtitan " +
      "(a file in adapters/torch/frameworks/); either may end in @PKG==VER[,PKG==VER...] to run those releases",
  );
}

export interface TorchInfo {
  python: string;
  torch: string;
  gloo: boolean;
  cuda: boolean;
  gpus: number;
  /** The framework's package version, when probed for one. */
  packageVersion?: string;
}

const PROBE = `
import json, sys, importlib
req = json.loads(sys.argv[1])
try:
    import torch, torch.distributed as dist
    import torch.distributed.tensor.debug
except Exception as e:
    print(json.dumps({"stage": "torch", "error": f"{type(e).__name__}: {e}"})); sys.exit(0)
out = {"torch": torch.__version__.split("+")[0], "gloo": dist.is_gloo_available(), "cuda": torch.cuda.is_available(), "gpus": torch.cuda.device_count()}
try:
    for m in req.get("imports", []):
        importlib.import_module(m)
    for t in req.get("targets", []):
        mod, _, qual = t.partition(":")
        obj = importlib.import_module(mod)
        for part in qual.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"{t} is not callable")
    if req.get("package"):
        import importlib.metadata as md
        out["packageVersion"] = md.version(req["package"])
except Exception as e:
    out.update({"stage": "target", "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
print(json.dumps(out))
`;

const probes = new Map<string, TorchInfo>();

/**
 * Whether torch (and the targets, when given) import in `python`; InputError saying how to fix it when
 * not. `what` names the asker in the message.
 */
export function probeTorch(
  python: string,
  req: { imports?: string[]; targets?: string[]; package?: string; hint?: string } = {},
  what = "the PyTorch adapter",
): TorchInfo {
  const key = `${python}|${JSON.stringify(req)}`;
  const hit = probes.get(key);
  if (hit) return hit;
  if (!existsSync(python)) {
    throw new InputError(`${what} needs PyTorch, which is not installed for clip-parity (no ${python}): ${SETUP_HINT}, or set CLIP_PARITY_TORCH_PYTHON to a Python that has torch`);
  }
  const r = spawnSync(python, ["-c", PROBE, JSON.stringify(req)], {
    encoding: "utf8",
    timeout: 180_000,
    env: { ...process.env, PYTHONPATH: pythonPath(), PYTHONDONTWRITEBYTECODE: "1", PYTHONWARNINGS: "ignore" },
  });
  const last = (r.stdout ?? "").trim().split("\n").pop() ?? "";
  let info: (TorchInfo & { stage?: string; error?: string }) | undefined;
  try {
    info = { python, ...JSON.parse(last) };
  } catch {
    throw new InputError(`${what}: ${python} could not be run (${r.error?.message ?? (r.stderr ?? "").trim().split("\n").slice(-3).join(" | ")}): ${SETUP_HINT}`);
  }
  if (info!.stage === "torch") throw new InputError(`${what}: torch does not import in ${python} (${info!.error}): ${SETUP_HINT}`);
  if (info!.stage === "target") {
    const names = [...(req.imports ?? []), ...(req.targets ?? [])].join(", ");
    throw new InputError(`${what}: ${names} cannot be imported with torch ${info!.torch}: ${info!.error}${req.hint ? ` (${req.hint})` : ""}`);
  }
  delete info!.stage;
  probes.set(key, info!);
  return info!;
}

/**
 * The class a torch subject claims for a cell: torch's vector_norm accumulates a float32 gradient's
 * |g|^p in float32 (on CPU and CUDA alike) and every framework here sums the per-tensor results in
 * float32 too: fp32-accum; a bf16 or f16 gradient's norm is returned in its own dtype: bf16.
 */
export function torchTolerance(dtype: DType, setting: TorchOptions["tolerance"]): ToleranceClass {
  if (setting !== "auto") return setting;
  return dtype === "f32" ? "fp32-accum" : "bf16";
}

// ---- one cell -------------------------------------------------------------------------------------------

const KINDS: readonly CollectiveKind[] = ["all_reduce", "all_gather", "broadcast", "barrier"];

function commRecord(r: Result | undefined): CommRecord {
  const k = () => ({ calls: 0, bytes: 0 });
  const rec: CommRecord = { calls: 0, bytes: 0, byKind: { all_reduce: k(), all_gather: k(), broadcast: k(), barrier: k() }, byGroup: {} };
  if (!r?.comm) return rec;
  rec.calls = r.comm.calls;
  rec.bytes = r.comm.bytes;
  for (const kind of KINDS) if (r.comm.byKind[kind]) rec.byKind[kind] = { ...r.comm.byKind[kind]! };
  rec.byGroup = { ...r.comm.byGroup };
  return rec;
}

function parseNorm(v: Result["norm"]): number | undefined {
  if (v === null) return undefined;
  if (typeof v === "number") return v;
  return v === "NaN" ? NaN : v === "Infinity" ? Infinity : -Infinity;
}

/**
 * " (at clip_grad.py:72 _get_total_norm < _dispatch.py:323 ...)": the innermost frames, short, the adapter's own
 * left out (where it called the target is not the framework's code, and its line moves with every adapter edit).
 */
function whereRaised(traceback: string[]): string {
  const frames = traceback
    .map((l) => /File "([^"]+)", line (\d+), in (\S+)/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null && resolve(m[1]!) !== ADAPTER)
    .map((m) => `${m[1]!.split("/").pop()}:${m[2]} ${m[3]}`);
  return frames.length ? ` (at ${frames.slice(-3).reverse().join(" < ")})` : "";
}


/**
 * The adapter builds DTensors from Shard and Replicate placements only (torch Partial is not
 * implemented): a cell with a Partial(sum) gradient is refused, naming the parameter, rather than run
 * with its partials taken for something else.
 */
/** Why a cell with a Partial(sum) gradient cannot be handed to torch (null when it has none). */
export function partialPlacement(params: readonly Pick<ParamView, "fqn" | "meshAxes" | "placements">[]): string | null {
  for (const p of params) {
    const i = p.placements.findIndex((x) => x.kind === "partial");
    if (i >= 0) return `${p.fqn} is placed Partial(sum) on ${p.meshAxes[i]}: torch subjects do not support Partial placements (the adapter builds DTensors from reduced local gradients)`;
  }
  return null;
}

export function refusePartial(params: readonly Pick<ParamView, "fqn" | "meshAxes" | "placements">[], what: string): void {
  const why = partialPlacement(params);
  if (why) throw new InputError(`${what}: ${why}`);
}

/** Whether this rank's shard of `view` is the one copy counted (ARG_SOURCES.grads_for_norm). */
export function countedHere(view: Pick<ParamView, "canonical" | "mesh" | "meshAxes" | "placements">, layout: ValidLayout, rank: number): boolean {
  if (!view.canonical) return false;
  const mesh = meshOf(view.mesh, layout);
  const coords = coordsOf(mesh, rank);
  return view.placements.every((p, i) => p.kind !== "replicate" || coords[axisIndex(mesh, view.meshAxes[i] as AxisName)] === 0);
}

function jobParam(view: ParamView, layout: ValidLayout, rank: number): JobParam {
  return {
    fqn: view.fqn,
    name: view.name,
    canonical: view.canonical,
    tieGroup: view.tieGroup,
    mesh: view.mesh,
    meshAxes: [...view.meshAxes],
    placements: view.placements.map((p) => ({ ...p })),
    globalShape: [...view.globalShape],
    block: { start: [...view.block.start], len: [...view.block.len] },
    hasGrad: view.grad !== null,
    countedHere: countedHere(view, layout, rank),
  };
}

/** What the last external cell of a torch subject did, beyond what the checks see. */
export interface TorchCellLog {
  /** Index = rank: the convention path each rank took (null: none, e.g. the adapter failed). */
  paths: (string | null)[];
  /** Not run: why the convention cannot express the cell. */
  notApplicable: string | null;
  /** Seconds from writing the jobs to reading every result (the adapter's share of the cell). */
  jobSeconds: number;
  /** Seconds spent starting a session for this cell (0 when one was reused). */
  sessionStartSeconds: number;
  /**
   * Where the cell's time went, in seconds: `inputs` (the harness writing every rank's shards and job),
   * the adapter's own phases as the slowest rank reports them (`load` the shards, `params` the DTensors
   * built from them, `call` the target under the collective and memory monitor, `settle` waiting for
   * freed tensors before the leak count, `save` the clipped shards, `meshes` built for a new layout), and
   * `results` (the harness reading the results back into the cell's tensors). `total` is all of it.
   */
  phases: Record<string, number>;
  /** Why the session was ended after the cell (a group out of step), or undefined. */
  sessionEnded?: string;
}

export interface TorchSubject extends Subject, ReadsVerdict {
  readonly spec: TorchSpec;
  readonly framework: Framework | null;
  readonly convention: Convention;
  readonly info: TorchInfo;
  readonly options: TorchOptions;
  /** The environment of the releases the spec pins (null: the pinned .venv). */
  readonly release: ReleaseEnvironment | null;
  /** Set after every external cell. */
  lastRun: TorchCellLog | null;
}

/** A run in which every rank failed with `message`: what the checks judge when the adapter never ran the cell. */
function failedRun(world: number, tolerance: ToleranceClass, message: string, liveness: string | null): ExternalRun {
  return {
    ranks: Array.from({ length: world }, (_, rank) => ({ rank, error: new Error(message) })),
    liveness,
    comm: Array.from({ length: world }, () => commRecord(undefined)),
    tolerance,
  };
}

/** The session that runs the subject's cells of this world size: started once, reused by its next cells. */
async function sessionOf(subject: TorchSubject, world: number): Promise<TorchSession> {
  const o = subject.options;
  const key = {
    world,
    python: o.python,
    device: o.device,
    // every subject in a process and session of its own (its releases' environment included): one target's
    // import-time patch or process-wide state never reaches another's cells
    isolation: subject.name,
  };
  return (await sessionFor(key, o, subject.convention.setup)) as TorchSession;
}

/** Rank `rank`'s job as the adapter's protocol states it: the cell, the convention, and where its shards go in and out. */
function clipJob(subject: TorchSubject, x: ExternalCell, rank: number, files: { grads: string; result: string }, timeoutMs: number): ClipJob {
  const o = subject.options;
  return {
    protocol: PROTOCOL_VERSION,
    kind: "clip",
    subject: subject.name,
    rank,
    world: x.world,
    layout: { ...x.layout },
    dtype: x.cell.dtype,
    maxNorm: x.maxNorm,
    normType: x.normType === Infinity ? "inf" : x.normType,
    errorIfNonfinite: x.errorIfNonfinite,
    foreach: o.foreach,
    collectiveTimeoutS: Math.min(o.collectiveTimeoutS, timeoutMs / 1000),
    convention: subject.convention,
    grads: files.grads,
    result: files.result,
    params: x.params[rank]!.map((v) => jobParam(v, x.layout, rank)),
  };
}

/** The adapter's phases into `phases`, each as the slowest rank reports it: the cell waits for its slowest rank. */
function recordSlowestPhases(phases: Record<string, number>, results: JobOutcome["results"]): void {
  for (const r of results) {
    for (const [phase, s] of Object.entries(r?.timings ?? {})) if (phase !== "total") phases[phase] = Math.max(phases[phase] ?? 0, s);
  }
}

/**
 * A rank's norm or its error, with the liveness failure the error shows (the adapter itself failed, or the rank
 * timed out in a collective) or null: a hang and a broken adapter fail liveness, a raise by the target does not.
 */
function rankOutcome(rank: number, r: Result, session: TorchSession): { outcome: ExternalRun["ranks"][number]; liveness: string | null } {
  if (!r.error) return { outcome: { rank, value: parseNorm(r.norm) }, liveness: null };
  const msg = `${r.error.type}: ${r.error.message}${whereRaised(r.error.traceback)}`;
  const liveness = r.adapterError
    ? `rank ${rank}: the PyTorch adapter failed: ${msg}\n${session.tail(12)}`
    : isCollectiveTimeout(r.error.message)
      ? `rank ${rank} timed out in a collective (a hang): ${msg}`
      : null;
  return { outcome: { rank, error: new Error(msg) }, liveness };
}

/**
 * A rank's clipped shards (the adapter's output file) back into the cell's tensors, which the checks read: throws when
 * the adapter returned a gradient the rank does not hold, or one of another dtype or size.
 */
function readBackClipped(x: ExternalCell, rank: number, file: string): void {
  const { backend } = x;
  const byFqn = new Map(x.params[rank]!.map((p) => [p.fqn, p]));
  const ops = backend.opsFor(rank);
  for (const { name, tensor } of backend.loadSafetensors(file, rank)) {
    try {
      const view = byFqn.get(name);
      if (!view?.grad) throw new Error(`the adapter returned a gradient for ${name}, which has none here`);
      if (tensor.dtype !== view.grad.dtype || tensor.numel !== view.grad.numel) {
        throw new Error(`${name}: the adapter returned ${tensor.dtype} [${tensor.shape.join(", ")}], expected ${view.grad.dtype} [${view.grad.shape.join(", ")}]`);
      }
      ops.copy_(view.grad, tensor);
    } finally {
      backend.free(tensor);
    }
  }
}

/**
 * What the interpreter itself may grow by during a call without any tensor or array of the target's (a first
 * call's lazy imports, Python's own arenas), above which the operating system's count of the call's resident
 * growth is judged as scratch; measured on the stock clip's first cells (README, "Isolation").
 */
export const OS_SCRATCH_SLACK_BYTES = 32 * 1024 * 1024;

/**
 * A rank's judged scratch: the allocator's peak, or the operating system's resident growth less
 * OS_SCRATCH_SLACK_BYTES where that is larger (memory no allocator sees: numpy, a C extension).
 */
export function judgedScratch(m: { scratchPeakBytes: number; osScratchBytes?: number | undefined }): number {
  return Math.max(m.scratchPeakBytes, (m.osScratchBytes ?? 0) - OS_SCRATCH_SLACK_BYTES);
}

/**
 * Whose gradients can have reached each rank (comm.reach): the ranks it is joined to, directly or through
 * others, by the process groups its collectives and its peers' ran on during the cell (`groupCalls`, on every
 * group of the process). Over-approximated, as the adapter sees groups and counts but not the order of the
 * collectives nor whose data each carried: a rank fails only when it returned a norm with no collective path
 * at all to gradients it needed (a target that read another rank's input instead). A barrier joins no one;
 * a group the adapter could not name joins every rank.
 */
export function torchReach(results: readonly (Result | undefined)[], world: number): number[][] {
  const root = Array.from({ length: world }, (_, r) => r);
  const find = (r: number): number => (root[r] === r ? r : (root[r] = find(root[r]!)));
  const join = (members: readonly number[]) => {
    for (const m of members.slice(1)) root[find(m)] = find(members[0]!);
  };
  for (const r of results) {
    const barriers = new Map<string, number>();
    for (const op of r?.comm?.ops ?? []) if (op.kind === "barrier") barriers.set(op.group, (barriers.get(op.group) ?? 0) + 1);
    for (const [group, calls] of Object.entries(r?.groupCalls ?? {})) {
      if (calls - (barriers.get(group) ?? 0) <= 0) continue; // a barrier moves no data
      const members = /^\d+(,\d+)*$/.test(group) ? group.split(",").map(Number).filter((m) => m < world) : root.map((_, i) => i);
      if (members.length) join(members);
    }
  }
  return root.map((_, r) => root.flatMap((__, q) => (find(q) === find(r) ? [q] : [])));
}

/** Every rank's result as the checks read it (norm or error, memory, the clipped gradients in place) and the cell's liveness. */
function readRanks(x: ExternalCell, session: TorchSession, outcome: JobOutcome, log: TorchCellLog, shardsFile: (rank: number) => string) {
  const { results, failure } = outcome;
  const ranks: ExternalRun["ranks"] = [];
  const memory: NonNullable<ExternalRun["memory"]> = [];
  let liveness = failure;
  for (let rank = 0; rank < x.world; rank++) {
    const r = results[rank];
    memory.push({ scratchPeakBytes: r?.memory ? judgedScratch(r.memory) : 0, leakedBytes: r?.memory?.leakedBytes ?? 0 });
    log.paths[rank] = r?.path ?? null;
    if (!r) {
      ranks.push({ rank, error: new Error(failure ?? "no result") });
      continue;
    }
    const seen = rankOutcome(rank, r, session);
    ranks.push(seen.outcome);
    liveness ??= seen.liveness;
    // The clipped gradients go back into the cell's tensors, whatever the norm was.
    const out = shardsFile(rank);
    if (!existsSync(out)) continue;
    try {
      readBackClipped(x, rank, out);
    } catch (err) {
      liveness ??= `rank ${rank}: the clipped gradients could not be read back: ${(err as Error).message}`;
    }
  }
  return { ranks, memory, liveness };
}

/**
 * One cell of a torch subject: the cell refused where the adapter cannot run it, else every rank's job run in the
 * subject's session and the results read back; `subject.lastRun` says where the time went.
 */
async function runExternal(subject: TorchSubject, x: ExternalCell): Promise<ExternalRun> {
  const { world, backend, layout } = x;
  const o = subject.options;
  const tolerance = torchTolerance(x.cell.dtype, o.tolerance);
  const log: TorchCellLog = { paths: Array.from({ length: world }, () => null), notApplicable: null, jobSeconds: 0, sessionStartSeconds: 0, phases: {} };
  subject.lastRun = log;
  if (backend.isMeta) return failedRun(world, tolerance, "the meta backend holds no gradient values: torch subjects run on the cpu backend", null);
  // a cell the adapter cannot build is skipped with the reason, as one the convention cannot be asked (the run goes on)
  const na = partialPlacement(x.params.flat()) ?? applicability(subject.convention, { layout, normType: x.normType, regime: x.cell.regime, errorIfNonfinite: x.errorIfNonfinite, dtype: x.cell.dtype });
  if (na) {
    log.notApplicable = na;
    return { ...failedRun(world, tolerance, `NotApplicable: ${subject.name}: ${na}`, null), notApplicable: na };
  }

  let session: TorchSession;
  const t0 = performance.now();
  try {
    session = await sessionOf(subject, world);
  } catch (err) {
    if (err instanceof AdapterStartError) return failedRun(world, tolerance, err.message, err.message);
    throw err;
  }
  log.sessionStartSeconds = session.startedAt >= t0 ? session.startSeconds : 0;

  const cellStarted = performance.now(); // after the session start, which is counted apart
  const cellInfo = JSON.stringify({ ...x.cell, world, layout });
  const files = session.newJob();
  const timeoutMs = x.timeoutMs ?? o.cellTimeoutS * 1000;
  let inputsMs = 0;
  const shardsFile = files.grads;
  const outcome = await session.runJob(
    files,
    (rank): ClipJob => {
      const t = performance.now();
      const entries = x.params[rank]!.filter((p) => p.grad !== null).map((p) => ({ name: p.fqn, tensor: p.grad as Tensor }));
      backend.saveSafetensors(shardsFile(rank), entries, { rank: String(rank), cell: cellInfo });
      inputsMs += performance.now() - t;
      return clipJob(subject, x, rank, { grads: shardsFile(rank), result: files.result(rank) }, timeoutMs);
    },
    timeoutMs,
  );
  log.jobSeconds = outcome.seconds;
  log.phases.inputs = inputsMs / 1000;
  recordSlowestPhases(log.phases, outcome.results);
  const readStarted = performance.now();
  const { ranks, memory, liveness } = readRanks(x, session, outcome, log, shardsFile);
  log.phases.results = (performance.now() - readStarted) / 1000;
  session.dropJob(files);
  log.phases.total = (performance.now() - cellStarted) / 1000;
  // A group left out of step (a target raised half-way on some ranks) must not reach the next cell.
  const outOfStep = outcome.failure ? null : groupsOutOfStep(outcome.results);
  if (outOfStep && session.alive) {
    log.sessionEnded = outOfStep;
    await session.close();
  }
  return {
    ranks,
    liveness,
    comm: outcome.results.map(commRecord),
    reach: torchReach(outcome.results, world),
    memory,
    tolerance,
    ...declaredScratch(subject.framework, x.params, x.layout.dp_shard),
  };
}

const product = (dims: readonly number[]) => dims.reduce((a, b) => a * b, 1);

/** The scratch budget a framework file's `scratch` declares, per rank (none when it declares none). */
export function declaredScratch(fw: Framework | null, params: ExternalCell["params"], shardOver = 1): Pick<ExternalRun, "scratchBudget"> {
  const s = fw?.scratch;
  if (!s) return {};
  const elements = (p: ParamView) => product(s.of === "parameter" ? p.globalShape : p.block.len);
  const largest = (views: readonly ParamView[]) =>
    s.of === "flat parameter shard" ? largestFlatShard(views, shardOver)
    : s.of === "rank's parameters" ? views.reduce((sum, v) => sum + product(v.block.len), 0)
    : Math.max(0, ...views.map(elements));
  const bytes = params.map((views) => largest(views) * s.bytesPerElement + DEFAULT_SCRATCH_SLACK_BYTES);
  return { scratchBudget: { bytes, rule: `${fw!.name} declares a ${s.bytesPerElement}-byte copy of ${s.of === "rank's parameters" ? "every parameter the rank holds" : `its largest ${s.of}`} + 1 MiB: ${s.why}` } };
}

/**
 * The elements of a rank's largest FSDP1 flat parameter shard: the parameters of each wrapped unit (the module
 * at the innermost numbered path segment, `layers.3.`, as transformer_auto_wrap_policy wraps a block; the root
 * holds the rest) concatenated whole and split in `shardOver` equal shards, the last padded.
 */
export function largestFlatShard(views: readonly ParamView[], shardOver: number): number {
  const units = new Map<string, number>();
  for (const v of views) {
    const unit = /^(.*\.\d+\.)/.exec(v.fqn)?.[1] ?? "";
    units.set(unit, (units.get(unit) ?? 0) + product(v.globalShape));
  }
  return Math.max(0, ...[...units.values()].map((n) => Math.ceil(n / shardOver)));
}

/** Every target a convention calls (probed before anything runs). */
function conventionTargets(c: Convention): string[] {
  const out = new Set<string>();
  for (const s of [...c.setup, ...c.paths.flatMap((p) => p.steps)]) {
    out.add(s.target);
    if (typeof s.receiver === "object" && "factory" in s.receiver) out.add(s.receiver.factory);
  }
  for (const p of c.paths) if (p.when !== "always") out.add(p.when.predicate);
  return [...out].filter((t) => TARGET_RE.test(t));
}

/**
 * The subject for a `torch:` spec; InputError (exit 2) when the spec is malformed, the framework unknown,
 * or torch or the target does not import. Options: the defaults, the CLIP_PARITY_TORCH_* overrides, then
 * `overrides`.
 */
export function loadTorchSubject(spec: string, overrides: Partial<TorchOptions> = {}): Subject {
  const parsed = parseTorchSpec(spec);
  const options = { ...torchOptionsFromEnv(), ...overrides };
  const framework = parsed.kind === "framework" ? getFramework(parsed.framework) : null;
  // a framework's install needs (torchrec: its CPU kernels' companions, itself without its CUDA-only dependency)
  const release = parsed.pins.length ? environmentFor(parsed.pins, { basePython: options.python, ...(framework?.install ? { install: framework.install } : {}) }) : null;
  if (release) {
    options.python = release.python;
    options.env = { ...options.env, ...release.env };
  }
  const convention = framework ? framework.convention : plainConvention(parsed.kind === "function" ? parsed.target : "");
  const pinned = new Set([...requirementPins(PINNED_REQUIREMENTS), ...requirementPins(NODEPS_REQUIREMENTS)].map((p) => p.name));
  const hint = framework
    ? pinned.has(normalizeName(framework.package)) || parsed.pins.length
      ? `\`npm run setup:torch\` installs the pinned frameworks (adapters/torch/requirements.txt)`
      : `${framework.package} is not pinned over the pinned torch (adapters/torch/requirements.txt): run a release of it with --with ${framework.package}==VERSION, which builds its environment from the package registry`
    : parsed.kind === "function" && parsed.module.startsWith("torchtitan")
      ? "`npm run setup:torch` installs torchtitan"
      : undefined;
  const info = probeTorch(
    options.python,
    { imports: framework?.imports ?? [], targets: conventionTargets(convention), package: framework?.package, hint },
    `subject "${spec}"`,
  );
  const what = framework
    ? `${framework.description} (${framework.package} ${info.packageVersion ?? "?"}, torch ${info.torch})`
    : `${parsed.kind === "function" ? `${parsed.module}.${parsed.fn}` : spec} from PyTorch ${info.torch}, run by adapters/torch under torchrun (one process per rank)`;
  const subject: TorchSubject = {
    name: spec,
    description: what,
    tolerance: options.tolerance === "auto" ? "fp32" : options.tolerance,
    spec: parsed,
    framework,
    convention,
    info,
    options,
    release,
    lastRun: null,
    async clip() {
      throw new Error(`${spec} runs in Python through the PyTorch adapter (Subject.external); it has no in-process clip`);
    },
    external: (cell) => runExternal(subject, cell),
    verdictOf: (r) =>
      causeVerdict(r, framework?.explain ?? {}, framework ? outsideConfigurations(framework, { ...r.cell, errorIfNonfinite: r.errorIfNonfinite, regime: r.cell.regime }) : null),
  };
  return subject;
}

/** Type guard: a subject loaded by loadTorchSubject. */
export function isTorchSubject(s: Subject): s is TorchSubject {
  return typeof (s as Partial<TorchSubject>).convention === "object" && "lastRun" in s;
}

/**
 * One cell: one subject on one layout, model, dtype, norm type and regime (SPEC §2).
 *
 * The data takes one road: plan the shards, fill each rank's gradients from the generator, run the
 * subject on every rank at once, then judge the outcome with every check against the reference.
 * Each phase is timed (CellResult.timings), so a slow cell says where its time went.
 */
import { createHash } from "node:crypto";
import type { ParamView, Subject, Tensor } from "../subject/api.ts";
import { clipCoefficient } from "../subject/api.ts";
import { Backend, DTYPE_BYTES, type BackendKind } from "../backend/backend.ts";
import { validateLayout, worldSize } from "../layout/layout.ts";
import { getModel } from "../model/models.ts";
import type { ModelManifest } from "../model/manifest.ts";
import { planWorld, type LocalParam } from "../model/plan.ts";
import { maxNormOf, regimeSpec } from "../gradients/regimes.ts";
import { computeReference, type Reference } from "../gradients/reference.ts";
import { World } from "../world/world.ts";
import { clipArgs, meshesOf, rankContext } from "../world/context.ts";
import { CHECKS } from "../checks/index.ts";
import type { CheckContext } from "../checks/types.ts";
import { skip } from "../checks/types.ts";
import { InputError } from "../errors.ts";
import { DEFAULT_SCRATCH_SLACK_BYTES, DTYPES, cellId, reproCommand, type Budgets, type Cell } from "../spec/cell.ts";
import type { CellResult, CellTimings, RankMemory } from "../results/types.ts";
import { deepFreeze } from "../util/freeze.ts";
import { dumpCell } from "./dump.ts";
import { gradSpecs } from "../gradients/specs.ts";
import { subjectRunning } from "../util/watch.ts";
import { describeValue } from "./thrown.ts";

export interface RunCellOptions {
  budgets?: Budgets;
  backend?: BackendKind;
  /** The subject, when the caller already loaded it. */
  subject: Subject;
  timeoutMs?: number;
  /** Called with everything the checks saw, before the cell's tensors are freed (e.g. --dump). */
  inspect?: (ctx: CheckContext) => void;
  /** Hash every local gradient after the clip into CellResult.tensorHash (goldens). */
  hashTensors?: boolean;
  /** Write the cell's tensors to this folder (`cell --dump`): gradients, reference, subject's result. */
  dumpDir?: string;
  /**
   * A model given explicitly instead of the built-in `cell.model` (e.g. a fuzzer's synthetic model).
   * Its name must equal `cell.model` and identify its content: the reference is cached by name.
   */
  model?: ModelManifest;
  /** Each rank's physical copies (index = rank) instead of the default plan of the model. */
  plan?: LocalParam[][];
  /** The command line printed to reproduce the cell, when `reproCommand` cannot express it. */
  repro?: string;
  /** The backend's limit on live bytes (DEFAULT_MAX_LIVE_BYTES). */
  maxLiveBytes?: number;
}

/** The meta backend holds no values: no reference, only shapes, bytes and collectives. */
const NO_REFERENCE: Reference = { powerSum: NaN, totalNorm: NaN, paramsWithGrad: 0, elementsWithGrad: 0 };

/**
 * The default plan of a built-in model on a layout, computed once per process: the plan is a pure
 * function of both, and a matrix runs many cells (subjects, regimes, dtypes) on each pair.
 */
const planCache = new Map<string, LocalParam[][]>();
const PLAN_CACHE_LIMIT = 64;

function defaultPlan(model: ModelManifest, cell: Cell): LocalParam[][] {
  const key = `${model.name}|${JSON.stringify(cell.layout)}`;
  let plan = planCache.get(key);
  if (!plan) {
    plan = deepFreeze(planWorld(model, cell.layout));
    if (planCache.size >= PLAN_CACHE_LIMIT) planCache.delete(planCache.keys().next().value!);
    planCache.set(key, plan);
  }
  return plan;
}

/** One hash of every local gradient of the cell after the clip; null on the meta backend. */
export function cellTensorHash(ctx: Pick<CheckContext, "backend" | "plan" | "grads">): string | null {
  if (ctx.backend.isMeta) return null;
  const h = createHash("sha256");
  ctx.plan.forEach((params, rank) =>
    params.forEach((p, i) => {
      const g = ctx.grads[rank][i];
      h.update(`${rank}\t${i}\t${p.fqn}\t${g ? ctx.backend.hash(g) : "-"}\n`);
    }),
  );
  return h.digest("hex").slice(0, 16);
}

/** An external subject's run, held to the subject's wall-clock limit like a clip on the simulated world. */
async function runExternal(external: NonNullable<Subject["external"]>, cell: Parameters<NonNullable<Subject["external"]>>[0]) {
  subjectRunning(true);
  try {
    return await external(cell);
  } finally {
    subjectRunning(false);
  }
}

export async function runCell(cell: Cell, options: RunCellOptions): Promise<CellResult> {
  const started = performance.now();
  const timings: CellTimings = { plan: 0, reference: 0, allocate: 0, generate: 0, subject: 0, collectives: 0, checks: 0, free: 0, total: 0 };
  let mark = started;
  const lap = (phase: Exclude<keyof CellTimings, "total">) => {
    const now = performance.now();
    timings[phase] += now - mark;
    mark = now;
  };
  const backendKind = options.backend ?? "cpu";
  const subject = options.subject;
  // A cell that crossed a thread or a file is plain data again: validated here, once.
  const layout = validateLayout(cell.layout);
  cell = cell.layout === layout ? cell : { ...cell, layout };
  const world = worldSize(layout);
  const model = options.model ?? getModel(cell.model);
  if (options.model && options.model.name !== cell.model) {
    throw new InputError(`cell.model "${cell.model}" does not name the model given to runCell ("${options.model.name}")`);
  }
  if (!DTYPES.includes(cell.dtype)) throw new InputError(`dtype: "${cell.dtype}" is not one of ${DTYPES.join(", ")}`);
  if (!(cell.normType > 0)) throw new InputError(`norm: ${cell.normType} must be a positive number or inf`);
  const regime = regimeSpec(cell.regime);
  const step = cell.step ?? 0;
  const seed = BigInt(cell.seed);
  // the logical gradient, what each copy must hold scaled (a Partial copy: its partial) and what it is filled with (gradients/specs.ts)
  const { logical: logicalSpec, held: genSpec, input: inputSpec } = gradSpecs(model, { dtype: cell.dtype, regime: cell.regime, seed, step, pp: layout.pp, shape: subject.shape });

  const plan = options.plan ? deepFreeze(options.plan) : defaultPlan(model, cell);
  if (plan.length !== world) throw new InputError(`the plan given to runCell has ${plan.length} ranks; the layout has ${world}`);
  lap("plan");

  const reference =
    backendKind === "meta" ? NO_REFERENCE : computeReference(model, cell.dtype, cell.normType, cell.regime, cell.seed, step);
  const maxNorm = maxNormOf(cell, reference.totalNorm);
  const errorIfNonfinite = cell.errorIfNonfinite ?? regime.errorIfNonfinite;
  const clipCoef = clipCoefficient(maxNorm, reference.totalNorm);
  lap("reference");

  const backend = new Backend(backendKind, world, { maxLiveBytes: options.maxLiveBytes });
  let result: CellResult | undefined;
  try {
    // Each rank's gradients in one native call that allocates and fills them (no zeroing pass); the
    // call is timed as `generate`, the rest of the bookkeeping as `allocate`.
    const grads: (Tensor | null)[][] = plan.map((params, rank) => {
      const withGrad = params.filter((p) => regime.hasGrad(p.index));
      const t0 = performance.now();
      const filled = backend.allocFillMany(
        rank,
        cell.dtype,
        withGrad.map((p) => ({ shape: p.block.len, gen: inputSpec(p), block: p.block, owner: `the gradient of ${p.fqn}` })),
      );
      timings.generate += performance.now() - t0;
      let k = 0;
      return params.map((p) => (regime.hasGrad(p.index) ? filled[k++] : null));
    });
    lap("allocate");
    timings.allocate -= timings.generate;
    const views: ParamView[][] = plan.map((params, rank) =>
      params.map((p, i) =>
        Object.freeze({
          fqn: p.fqn,
          name: p.name,
          canonical: p.canonical,
          tieGroup: p.tieGroup,
          kind: p.kind,
          layer: p.layer,
          stage: p.stage,
          mesh: p.mesh,
          meshAxes: p.meshAxes,
          placements: p.placements,
          globalShape: p.block.globalShape,
          block: p.block,
          grad: grads[rank][i],
        }),
      ),
    );
    backend.markStage("after grads");
    const before = plan.map((_, r) => backend.liveBytes(r));
    for (let r = 0; r < world; r++) backend.resetPeak(r);
    lap("allocate");

    const meshes = meshesOf(layout);
    const sim = new World(world, backend);
    // An external subject (the PyTorch adapter) runs the whole cell itself, outside the simulated world.
    const external = subject.external ? await runExternal(subject.external.bind(subject), { cell, layout, world, params: views, maxNorm, normType: cell.normType, errorIfNonfinite, backend, timeoutMs: options.timeoutMs }) : undefined;
    const run = external
      ? { ranks: external.ranks, liveness: external.liveness, comm: external.comm }
      : await sim.run(
          (rank) =>
            subject.clip(rankContext(rank, layout, meshes, sim, backend, plan), clipArgs(views[rank], { maxNorm, normType: cell.normType, errorIfNonfinite })),
          { timeoutMs: options.timeoutMs },
        );
    // what a rank returned instead of a number is kept as a line saying what it was (never the value itself)
    for (const o of run.ranks) if (o.value !== undefined && typeof o.value !== "number") o.value = describeValue(o.value) as never;
    backend.markStage("after clip");
    lap("subject");
    timings.collectives = sim.collectiveMs;
    timings.subject -= sim.collectiveMs;

    const memory: RankMemory[] = plan.map((params, rank) => {
      let largest = 0;
      for (const p of params) largest = Math.max(largest, p.numel);
      return {
        rank,
        gradBytes: before[rank],
        scratchPeakBytes: external?.memory?.[rank]?.scratchPeakBytes ?? backend.peakBytes(rank) - before[rank],
        budgetBytes: options.budgets?.scratchBytes ?? external?.scratchBudget?.bytes[rank] ?? largest * DTYPE_BYTES.f32 + (options.budgets?.scratchSlackBytes ?? DEFAULT_SCRATCH_SLACK_BYTES),
        ...(options.budgets?.scratchBytes === undefined && external?.scratchBudget ? { budgetRule: external.scratchBudget.rule } : {}),
        leakedBytes: external?.memory?.[rank]?.leakedBytes ?? backend.liveBytes(rank) - before[rank],
        stages: [...backend.stageProfile(rank)],
      };
    });

    const repro = options.repro ?? reproCommand(cell, backendKind);
    const ctx: CheckContext = {
      cell,
      backend,
      subject,
      tolerance: external?.tolerance ?? subject.tolerance ?? "fp32",
      maxNorm,
      errorIfNonfinite,
      reference,
      clipCoef,
      plan,
      grads,
      views,
      outcomes: run.ranks,
      liveness: run.liveness,
      memory,
      comm: run.comm,
      genSpec,
      logicalSpec,
      inputSpec,
      repro,
      budgets: options.budgets ?? {},
    };
    const notApplicable = external?.notApplicable;
    const checks = CHECKS.map((check) => {
      if (notApplicable !== undefined) return skip(check.id, `not applicable: ${notApplicable}`);
      const r = check.judge(ctx);
      return r.status === "fail" ? { ...r, message: `${r.message}\n  reproduce: ${repro}` } : r;
    });
    const tensorHash = options.hashTensors ? cellTensorHash(ctx) : undefined;
    if (options.dumpDir) dumpCell(options.dumpDir, ctx);
    options.inspect?.(ctx);
    lap("checks");
    const norm0 = run.ranks[0]?.value;
    result = {
      id: cellId(cell),
      cell,
      backend: backendKind,
      subjectName: subject.name,
      maxNorm,
      errorIfNonfinite,
      totalNorm: typeof norm0 === "number" ? norm0 : null,
      referenceNorm: reference.totalNorm,
      clipCoef,
      checks,
      ranks: run.ranks.map((o) => ({ rank: o.rank, norm: o.value, error: o.error?.message })),
      memory,
      comm: run.comm,
      liveness: run.liveness,
      repro,
      durationMs: 0,
      timings,
      ...(tensorHash !== undefined ? { tensorHash } : {}),
    };
    return result;
  } finally {
    backend.freeAll();
    for (let r = 0; r < world; r++) {
      if (backend.liveBytes(r) !== 0) throw new Error(`internal: rank ${r} ledger not zero after the cell (${backend.liveBytes(r)} bytes)`);
    }
    lap("free");
    timings.total = performance.now() - started;
    if (result) result.durationMs = timings.total;
  }
}

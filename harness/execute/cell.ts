/**
 * One cell: one subject on one layout, model, dtype, norm type and regime (SPEC §2).
 *
 * The data takes one road: plan the shards, fill each rank's gradients from the generator, run the
 * subject on every rank at once, then hand the store to the judge (harness/judge), which computes the
 * reference and judges the outcome with every check in a realm the subject's code cannot reach. Each
 * phase is timed (CellResult.timings), so a slow cell says where its time went.
 */
import type { ParamView, Subject, Tensor } from "../subject/api.ts";
import { Backend, type BackendKind, type GenSpec } from "../backend/backend.ts";
import type { ValidLayout } from "../layout/layout.ts";
import type { ModelManifest } from "../model/manifest.ts";
import type { LocalParam } from "../model/plan.ts";
import { World } from "../world/world.ts";
import { clipArgs, meshesOf, rankContext } from "../world/context.ts";
import { cellId, type Budgets, type Cell } from "../cell/cell.ts";
import type { CellResult, CellTimings, ReadsVerdict } from "../results/types.ts";
import { subjectRunning } from "../util/watch.ts";
import { describeValue } from "../util/thrown.ts";
import { cellSetup, paramViews, type JudgeCellInput } from "../judge/setup.ts";
import type { JudgeRequest, RankReport, Verdict } from "../judge/judge.ts";
import { currentJudge } from "../judge/client.ts";

export interface RunCellOptions {
  budgets?: Budgets;
  backend?: BackendKind;
  /** The subject, when the caller already loaded it. */
  subject: Subject;
  timeoutMs?: number;
  /**
   * Called on the caller's side with each rank's gradients (null where a copy has none) after the clip
   * and the verdict, before the tensors are freed (the fuzzer's bucket oracle, the cuda parity hashes).
   */
  inspect?: (cell: { grads: (Tensor | null)[][]; backend: Backend }) => void;
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

/** An external subject's run, held to the subject's wall-clock limit like a clip on the simulated world. */
async function runExternal(external: NonNullable<Subject["external"]>, cell: Parameters<NonNullable<Subject["external"]>>[0]) {
  subjectRunning(true);
  try {
    return await external(cell);
  } finally {
    subjectRunning(false);
  }
}

/** What a rank raised, as it crosses to the judge: its name and message (never the object itself). */
function reportOf(o: { rank: number; value?: unknown; error?: Error }): RankReport {
  if (!o.error) return { rank: o.rank, value: o.value };
  const e = o.error as unknown;
  const error = e instanceof Error ? { name: String(e.name), message: String(e.message) } : { name: "Error", message: describeValue(e) };
  return { rank: o.rank, error };
}

/**
 * Each rank's gradients, one native call per rank that allocates and fills them (no zeroing pass): the
 * calls are timed as `generate`; null where a copy has no gradient in this regime.
 */
function fillGradients(
  backend: Backend,
  plan: LocalParam[][],
  hasGrad: (p: LocalParam) => boolean,
  dtype: Cell["dtype"],
  inputSpec: (p: LocalParam) => GenSpec,
  timings: CellTimings,
): (Tensor | null)[][] {
  return plan.map((params, rank) => {
    const t0 = performance.now();
    const filled = backend.allocFillMany(
      rank,
      dtype,
      params.filter(hasGrad).map((p) => ({ shape: p.block.len, gen: inputSpec(p), block: p.block, owner: `the gradient of ${p.fqn}` })),
    );
    timings.generate += performance.now() - t0;
    let k = 0;
    return params.map((p) => (hasGrad(p) ? filled[k++]! : null));
  });
}

interface ClipCall {
  cell: Cell;
  layout: ValidLayout;
  world: number;
  plan: LocalParam[][];
  views: ParamView[][];
  backend: Backend;
  maxNorm: number;
  errorIfNonfinite: boolean;
  timeoutMs?: number;
}

/**
 * The subject's clip on every rank of the simulated world at once; an external subject (the PyTorch
 * adapter) runs the whole cell itself, outside it. What a rank returned instead of a number is kept as a
 * line saying what it was, never the value itself.
 */
async function clipEveryRank(subject: Subject, c: ClipCall) {
  const { cell, layout, world, plan, views, backend, maxNorm, errorIfNonfinite, timeoutMs } = c;
  const sim = new World(world, backend);
  const external = subject.external ? await runExternal(subject.external.bind(subject), { cell, layout, world, params: views, maxNorm, normType: cell.normType, errorIfNonfinite, backend, timeoutMs }) : undefined;
  const meshes = meshesOf(layout);
  const run = external
    ? { ranks: external.ranks, liveness: external.liveness, comm: external.comm, reach: external.reach ?? null }
    : await sim.run((rank) => subject.clip(rankContext(rank, layout, meshes, sim, backend, plan), clipArgs(views[rank]!, { maxNorm, normType: cell.normType, errorIfNonfinite })), { timeoutMs });
  for (const o of run.ranks) if (o.value !== undefined && typeof o.value !== "number") o.value = describeValue(o.value) as never;
  return { run, external, collectiveMs: sim.collectiveMs };
}

/** The cell's result: the judge's verdict beside what each rank returned and what it moved. */
function cellResult(cell: Cell, backend: BackendKind, subject: Subject, verdict: Verdict, run: Awaited<ReturnType<typeof clipEveryRank>>["run"], timings: CellTimings): CellResult {
  const norm0 = run.ranks[0]?.value;
  return {
    id: cellId(cell),
    cell,
    backend,
    subjectName: subject.name,
    maxNorm: verdict.maxNorm,
    errorIfNonfinite: verdict.errorIfNonfinite,
    totalNorm: typeof norm0 === "number" ? norm0 : null,
    referenceNorm: verdict.referenceNorm,
    clipCoef: verdict.clipCoef,
    checks: verdict.checks,
    ranks: run.ranks.map((o) => ({ rank: o.rank, norm: o.value, error: o.error?.message })),
    memory: verdict.memory,
    comm: run.comm,
    liveness: run.liveness,
    repro: verdict.repro,
    durationMs: 0,
    timings,
    ...(verdict.tensorHash !== undefined ? { tensorHash: verdict.tensorHash } : {}),
  };
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
  const setup = cellSetup({ cell, backend: backendKind, model: options.model, plan: options.plan, shape: subject.shape });
  const { layout, world, regime, plan } = setup;
  cell = setup.cell;
  const input: JudgeCellInput = { cell, backend: backendKind, model: options.model, plan: options.plan, shape: subject.shape };
  const { input: inputSpec } = setup.specs;
  lap("plan");

  const judge = currentJudge();
  const { maxNorm, errorIfNonfinite } = await judge.prepare(input);
  lap("reference");

  const backend = new Backend(backendKind, world, { maxLiveBytes: options.maxLiveBytes });
  let result: CellResult | undefined;
  try {
    const grads = fillGradients(backend, plan, (p) => regime.hasGrad(p.index), cell.dtype, inputSpec, timings);
    lap("allocate");
    timings.allocate -= timings.generate;
    const views = paramViews(plan, grads);
    backend.markStage("after grads");
    const before = plan.map((_, r) => backend.liveBytes(r));
    for (let r = 0; r < world; r++) backend.resetPeak(r);
    lap("allocate");

    const { run, external, collectiveMs } = await clipEveryRank(subject, { cell, layout, world, plan, views, backend, maxNorm, errorIfNonfinite, timeoutMs: options.timeoutMs });
    backend.markStage("after clip");
    lap("subject");
    timings.collectives = collectiveMs;
    timings.subject -= collectiveMs;

    const request: JudgeRequest = {
      ...input,
      grads: grads.map((row) => row.map((g) => (g ? g.id : null))),
      before,
      stages: plan.map((_, r) => [...backend.stageProfile(r)]),
      outcomes: run.ranks.map(reportOf),
      liveness: run.liveness,
      comm: run.comm,
      reach: run.reach,
      subjectName: subject.name,
      tolerance: subject.tolerance ?? "fp32",
      ...(external
        ? { external: { memory: external.memory, tolerance: external.tolerance, scratchBudget: external.scratchBudget, notApplicable: external.notApplicable } }
        : {}),
      budgets: options.budgets,
      hashTensors: options.hashTensors,
      dumpDir: options.dumpDir,
      repro: options.repro,
    };
    const verdict = await judge.judge(request, backend);
    options.inspect?.({ grads, backend });
    timings.reference += verdict.referenceMs;
    timings.checks += verdict.checksMs;
    mark = performance.now();
    result = cellResult(cell, backendKind, subject, verdict, run, timings);
    const reader = subject as Partial<ReadsVerdict>;
    const causes = external && typeof reader.verdictOf === "function" ? reader.verdictOf(result) : null;
    if (causes) result.verdict = causes;
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

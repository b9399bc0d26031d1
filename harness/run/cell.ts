/**
 * One cell: one subject on one layout, model, dtype, norm type and regime (SPEC §2).
 *
 * The data takes one road: plan the shards, fill each rank's gradients from the generator, run the
 * subject on every rank at once, then judge the outcome with every check against the reference.
 */
import type { DType, ParamView, Subject, Tensor } from "../clip/api.ts";
import { clipCoefficient } from "../clip/api.ts";
import { Backend, DTYPE_BYTES, type BackendKind, type GenSpec, type StageRecord } from "../backend/backend.ts";
import { formatLayout, validateLayout, worldSize, type Layout } from "../layout/layout.ts";
import { getModel } from "../model/models.ts";
import type { ModelManifest } from "../model/manifest.ts";
import { planWorld, type LocalParam } from "../model/plan.ts";
import { f32Below, regimeSpec, type Regime } from "../clip/regimes.ts";
import { computeReference, type Reference } from "../clip/reference.ts";
import { World, type CommRecord, type RankOutcome } from "../world/world.ts";
import { meshesOf, rankContext } from "../world/context.ts";
import { CHECKS, type CheckResult } from "../checks/index.ts";
import { InputError } from "../errors.ts";

export const DTYPES: readonly DType[] = ["f32", "bf16", "f16"];

/** What identifies a cell. `subject` is a built-in name or a module path. */
export interface Cell {
  subject: string;
  layout: Layout;
  model: string;
  dtype: DType;
  /** 2, 1, Infinity or any p > 0. */
  normType: number;
  regime: Regime;
  seed: number;
  /** Overrides the regime's max_norm. */
  maxNorm?: number;
  /** Overrides the regime's default. */
  errorIfNonfinite?: boolean;
  step?: number;
}

export function formatNorm(p: number): string {
  return p === Infinity ? "inf" : String(p);
}

export function cellId(c: Cell): string {
  const parts = [c.subject, formatLayout(c.layout), c.model, c.dtype, `n${formatNorm(c.normType)}`, c.regime, `s${c.seed}`];
  if (c.maxNorm !== undefined) parts.push(`max${c.maxNorm}`);
  if (c.errorIfNonfinite !== undefined) parts.push(c.errorIfNonfinite ? "err" : "noerr");
  if (c.step) parts.push(`step${c.step}`);
  return parts.join("/");
}

/** One command line that reruns this cell alone. */
export function reproCommand(c: Cell, backend: BackendKind): string {
  const args = [
    "npx clip-parity cell",
    `--subject ${c.subject}`,
    `--layout ${formatLayout(c.layout)}`,
    `--model ${c.model}`,
    `--dtype ${c.dtype}`,
    `--norm ${formatNorm(c.normType)}`,
    `--regime ${c.regime}`,
    `--seed ${c.seed}`,
  ];
  if (c.maxNorm !== undefined) args.push(`--max-norm ${c.maxNorm}`);
  if (c.errorIfNonfinite !== undefined) args.push(`--error-if-nonfinite ${c.errorIfNonfinite}`);
  if (backend !== "cpu") args.push(`--backend ${backend}`);
  return args.join(" ");
}

export interface RankMemory {
  rank: number;
  /** Live bytes of gradients when the clip starts. */
  gradBytes: number;
  /** Peak during the clip minus live bytes before it. */
  scratchPeakBytes: number;
  /** float32 size of the rank's largest local shard + 1 MiB (SPEC §10). */
  budgetBytes: number;
  /** Bytes the subject left allocated after the clip. */
  leakedBytes: number;
  /** The ledger at named stages; on cuda also the device's own free/total readings beside it. */
  stages: StageRecord[];
}

export interface CellResult {
  id: string;
  cell: Cell;
  backend: BackendKind;
  subjectName: string;
  maxNorm: number;
  errorIfNonfinite: boolean;
  totalNorm: number | null;
  referenceNorm: number;
  clipCoef: number;
  checks: CheckResult[];
  ranks: { rank: number; norm?: number; error?: string }[];
  memory: RankMemory[];
  comm: CommRecord[];
  liveness: string | null;
  repro: string;
  durationMs: number;
}

/** Everything a check may look at. Tensors stay alive until every check has judged. */
export interface CheckContext {
  cell: Cell;
  backend: Backend;
  subject: Subject;
  tolerance: "exact" | "fp32" | "bf16";
  maxNorm: number;
  errorIfNonfinite: boolean;
  reference: Reference;
  /** The reference's clip coefficient. */
  clipCoef: number;
  plan: LocalParam[][];
  grads: (Tensor | null)[][];
  views: ParamView[][];
  outcomes: RankOutcome<number>[];
  liveness: string | null;
  memory: RankMemory[];
  comm: CommRecord[];
  genSpec(p: LocalParam): GenSpec;
  repro: string;
  budgets: Budgets;
}

/** Per-matrix overrides of the default budgets of SPEC §10. */
export interface Budgets {
  /** Scratch bytes allowed per rank during the clip (default: float32 size of the largest local shard + 1 MiB). */
  scratchBytes?: number;
  /** Collectives allowed per rank per clip (default: distinct reduction groups + 1). */
  collectives?: number;
}

export interface RunCellOptions {
  budgets?: Budgets;
  backend?: BackendKind;
  /** The subject, when the caller already loaded it. */
  subject: Subject;
  timeoutMs?: number;
  /** Called with everything the checks saw, before the cell's tensors are freed (e.g. --dump). */
  inspect?: (ctx: CheckContext) => void;
  /**
   * A model given explicitly instead of the built-in `cell.model` (e.g. a fuzzer's synthetic model).
   * Its name must equal `cell.model` and identify its content: the reference is cached by name.
   */
  model?: ModelManifest;
  /** Each rank's physical copies (index = rank) instead of the default plan of the model. */
  plan?: LocalParam[][];
  /** The command line printed to reproduce the cell, when `reproCommand` cannot express it. */
  repro?: string;
}

/** The meta backend holds no values: no reference, only shapes, bytes and collectives. */
const NO_REFERENCE: Reference = { powerSum: NaN, totalNorm: NaN, paramsWithGrad: 0 };

function firstGradIndex(params: readonly { index: number }[], hasGrad: (i: number) => boolean): number {
  for (const p of params) if (hasGrad(p.index)) return p.index;
  return -1;
}

export async function runCell(cell: Cell, options: RunCellOptions): Promise<CellResult> {
  const started = performance.now();
  const backendKind = options.backend ?? "cpu";
  const subject = options.subject;
  const layout = validateLayout(cell.layout);
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
  const specialIndex = regime.special === null ? -1 : firstGradIndex(model.params, regime.hasGrad);

  const genSpec = (p: { name: string; index: number }): GenSpec => {
    const g: GenSpec = { seed, step, name: p.name, dtype: cell.dtype, exp: regime.exp, mode: regime.mode };
    if (p.index === specialIndex) {
      g.specialIndex = 0;
      g.specialValue = regime.special!;
    }
    return g;
  };

  const reference =
    backendKind === "meta" ? NO_REFERENCE : computeReference(model, cell.dtype, cell.normType, cell.regime, cell.seed, step);
  const maxNorm = cell.maxNorm ?? (regime.maxNorm === "boundary" ? f32Below(reference.totalNorm) : regime.maxNorm);
  const errorIfNonfinite = cell.errorIfNonfinite ?? regime.errorIfNonfinite;
  const clipCoef = clipCoefficient(maxNorm, reference.totalNorm);

  const plan = options.plan ?? planWorld(model, layout);
  if (plan.length !== world) throw new InputError(`the plan given to runCell has ${plan.length} ranks; the layout has ${world}`);
  const backend = new Backend(backendKind, world);
  try {
    const grads: (Tensor | null)[][] = plan.map((params, rank) =>
      params.map((p) => {
        if (!regime.hasGrad(p.index)) return null;
        const t = backend.alloc(rank, cell.dtype, p.block.len);
        backend.fillGrad(t, genSpec(p), p.block);
        return t;
      }),
    );
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

    const meshes = meshesOf(layout);
    const sim = new World(world, backend);
    // An external subject (the PyTorch adapter) runs the whole cell itself, outside the simulated world.
    const external = subject.external
      ? await subject.external({ cell, layout, world, params: views, maxNorm, normType: cell.normType, errorIfNonfinite, backend, timeoutMs: options.timeoutMs })
      : undefined;
    const run = external
      ? { ranks: external.ranks, liveness: external.liveness, comm: external.comm }
      : await sim.run(
          (rank) =>
            subject.clip(rankContext(rank, layout, meshes, sim, backend), {
              params: views[rank],
              maxNorm,
              normType: cell.normType,
              errorIfNonfinite,
            }),
          { timeoutMs: options.timeoutMs },
        );
    backend.markStage("after clip");

    const memory: RankMemory[] = plan.map((params, rank) => {
      let largest = 0;
      for (const p of params) largest = Math.max(largest, p.numel);
      return {
        rank,
        gradBytes: before[rank],
        scratchPeakBytes: external?.memory?.[rank]?.scratchPeakBytes ?? backend.peakBytes(rank) - before[rank],
        budgetBytes: options.budgets?.scratchBytes ?? largest * DTYPE_BYTES.f32 + 1024 * 1024,
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
      repro,
      budgets: options.budgets ?? {},
    };
    const checks = CHECKS.map((check) => {
      const r = check.judge(ctx);
      return r.status === "fail" ? { ...r, message: `${r.message}\n  reproduce: ${repro}` } : r;
    });
    options.inspect?.(ctx);
    const norm0 = run.ranks[0]?.value;
    return {
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
      durationMs: performance.now() - started,
    };
  } finally {
    backend.freeAll();
    for (let r = 0; r < world; r++) {
      if (backend.liveBytes(r) !== 0) throw new Error(`internal: rank ${r} ledger not zero after the cell (${backend.liveBytes(r)} bytes)`);
    }
  }
}

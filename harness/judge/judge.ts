/**
 * The judge: everything that decides a cell's verdict (the reference, the generator's expectations, the
 * memory read from the ledger, every check), in a realm the subject's code cannot reach (issue 41).
 *
 * A cell's worker thread runs the subject; the judge runs in a thread of its own (judge-worker.ts) that
 * never loads a subject module, and reads the ranks' tensors and ledgers from the native store the cell
 * filled (shared by a one-use ticket, not copied). So a subject that poisons a cache, rewrites an addon
 * prototype or mutates a manifest in its own thread changes nothing the judge sees. Where no subject code
 * shares the thread (the main thread driving a torch subject), the same functions run in place.
 *
 * Two calls per cell: `prepare` (what the subject is told: max_norm, which in the boundary regime is set
 * from the reference norm, without the norm itself) and `judge` (the verdict).
 */
import { createHash } from "node:crypto";
import type { Tensor, ToleranceClass, CommRecord } from "../subject/api.ts";
import { clipCoefficient } from "../numerics/numerics.ts";
import { Backend, DTYPE_BYTES, type StageRecord } from "../backend/backend.ts";
import type { ModelManifest } from "../model/manifest.ts";
import { maxNormOf } from "../gradients/regimes.ts";
import { computeReference, type Reference } from "../gradients/reference.ts";
import { cellSetup, paramViews, type JudgeCellInput } from "./setup.ts";
import { CHECKS } from "../checks/index.ts";
import type { CheckContext } from "../checks/types.ts";
import { skip } from "../checks/types.ts";
import { DEFAULT_SCRATCH_SLACK_BYTES, reproCommand, type Budgets } from "../cell/cell.ts";
import type { CheckResult, RankMemory } from "../results/types.ts";
import { dumpCell } from "./dump.ts";

export type { JudgeCellInput } from "./setup.ts";

/** What the subject's side is told before the clip. */
export interface Prepared {
  maxNorm: number;
  errorIfNonfinite: boolean;
}

/** A rank's outcome as it crosses threads: the returned value, or what it raised (name and message). */
export interface RankReport {
  rank: number;
  value?: unknown;
  error?: { name: string; message: string };
}

/** What the subject's side hands the judge after the clip: where the tensors are and what the world saw. */
export interface JudgeRequest extends JudgeCellInput {
  /** Per rank, per planned copy: the gradient tensor's id in the store, or null (no gradient). */
  grads: (number | null)[][];
  /** Per rank: live bytes after the gradients were filled, before the clip. */
  before: number[];
  stages: StageRecord[][];
  outcomes: RankReport[];
  liveness: string | null;
  comm: CommRecord[];
  /** Per rank, the ranks whose data reached it through collectives; null from an external runtime. */
  reach: number[][] | null;
  subjectName: string;
  tolerance: ToleranceClass;
  /** Only from an external runtime (the registered torch adapter): what the backend ledger cannot see. */
  external?: {
    memory?: { scratchPeakBytes: number; leakedBytes: number }[];
    tolerance?: ToleranceClass;
    scratchBudget?: { bytes: number[]; rule: string };
    notApplicable?: string;
  };
  budgets?: Budgets;
  hashTensors?: boolean;
  dumpDir?: string;
  repro?: string;
}

export interface Verdict {
  maxNorm: number;
  errorIfNonfinite: boolean;
  referenceNorm: number;
  clipCoef: number;
  checks: CheckResult[];
  memory: RankMemory[];
  tensorHash?: string | null;
  repro: string;
  /** Milliseconds the judge spent on the reference and on the checks. */
  referenceMs: number;
  checksMs: number;
}

/** The meta backend holds no values: no reference, only shapes, bytes and collectives. */
const NO_REFERENCE: Reference = { powerSum: NaN, totalNorm: NaN, paramsWithGrad: 0, elementsWithGrad: 0 };

function referenceOf(input: JudgeCellInput, model: ModelManifest, step: number): Reference {
  const { cell } = input;
  return input.backend === "meta" ? NO_REFERENCE : computeReference(model, cell.dtype, cell.normType, cell.regime, cell.seed, step);
}

/** What the subject is told: max_norm (from the reference in the boundary regime) and error_if_nonfinite. */
export function prepareCell(input: JudgeCellInput): Prepared {
  const { cell, model, regime, step } = cellSetup(input);
  const reference = referenceOf(input, model, step);
  return { maxNorm: maxNormOf(cell, reference.totalNorm), errorIfNonfinite: cell.errorIfNonfinite ?? regime.errorIfNonfinite };
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

/** A rank's report as the checks read it: an Error with the name and message the subject raised. */
function outcomeOf(r: RankReport) {
  if (!r.error) return { rank: r.rank, value: r.value as number };
  const e = new Error(r.error.message);
  e.name = r.error.name;
  return { rank: r.rank, error: e };
}

/**
 * The verdict on a cell whose clip has run, read from `backend` (the judge's own handle on the cell's
 * store). The tensors named in `req.grads` must be the ones the harness filled: their rank, dtype and
 * shape are checked against the judge's own plan before anything is judged.
 */
export function judgeCell(req: JudgeRequest, backend: Backend): Verdict {
  const t0 = performance.now();
  const { cell, world, model, regime, step, specs, plan } = cellSetup(req);
  const reference = referenceOf(req, model, step);
  const maxNorm = maxNormOf(cell, reference.totalNorm);
  const errorIfNonfinite = cell.errorIfNonfinite ?? regime.errorIfNonfinite;
  const clipCoef = clipCoefficient(maxNorm, reference.totalNorm);
  const t1 = performance.now();

  if (req.grads.length !== world) throw new Error(`internal: the judge got gradients of ${req.grads.length} ranks; the layout has ${world}`);
  const grads: (Tensor | null)[][] = plan.map((params, rank) =>
    params.map((p, i) => {
      const id = req.grads[rank]?.[i] ?? null;
      if (regime.hasGrad(p.index) !== (id !== null)) throw new Error(`internal: rank ${rank} ${p.fqn}: a gradient is ${id === null ? "missing" : "present against the regime"}`);
      return id === null ? null : backend.adopt(id, rank, cell.dtype, p.block.len);
    }),
  );
  const views = paramViews(plan, grads);

  const external = req.external;
  const memory: RankMemory[] = plan.map((params, rank) => {
    let largest = 0;
    for (const p of params) largest = Math.max(largest, p.numel);
    const before = req.before[rank]!;
    return {
      rank,
      gradBytes: before,
      scratchPeakBytes: external?.memory?.[rank]?.scratchPeakBytes ?? backend.peakBytes(rank) - before,
      budgetBytes: req.budgets?.scratchBytes ?? external?.scratchBudget?.bytes[rank] ?? largest * DTYPE_BYTES.f32 + (req.budgets?.scratchSlackBytes ?? DEFAULT_SCRATCH_SLACK_BYTES),
      ...(req.budgets?.scratchBytes === undefined && external?.scratchBudget ? { budgetRule: external.scratchBudget.rule } : {}),
      leakedBytes: external?.memory?.[rank]?.leakedBytes ?? backend.liveBytes(rank) - before,
      stages: [...(req.stages[rank] ?? [])],
    };
  });

  const repro = req.repro ?? reproCommand(cell, req.backend);
  const ctx: CheckContext = {
    cell,
    backend,
    subject: { name: req.subjectName, tolerance: req.tolerance, shape: req.shape },
    tolerance: external?.tolerance ?? req.tolerance,
    maxNorm,
    errorIfNonfinite,
    reference,
    clipCoef,
    plan,
    grads,
    views,
    outcomes: req.outcomes.map(outcomeOf),
    liveness: req.liveness,
    memory,
    comm: req.comm,
    reach: req.reach,
    genSpec: specs.held,
    logicalSpec: specs.logical,
    inputSpec: specs.input,
    repro,
    budgets: req.budgets ?? {},
  };
  const notApplicable = external?.notApplicable;
  const checks = CHECKS.map((check) => {
    if (notApplicable !== undefined) return skip(check.id, `not applicable: ${notApplicable}`);
    const r = check.judge(ctx);
    return r.status === "fail" ? { ...r, message: `${r.message}\n  reproduce: ${repro}` } : r;
  });
  const tensorHash = req.hashTensors ? cellTensorHash(ctx) : undefined;
  if (req.dumpDir) dumpCell(req.dumpDir, ctx);
  return {
    maxNorm,
    errorIfNonfinite,
    referenceNorm: reference.totalNorm,
    clipCoef,
    checks,
    memory,
    ...(tensorHash !== undefined ? { tensorHash } : {}),
    repro,
    referenceMs: t1 - t0,
    checksMs: performance.now() - t1,
  };
}

/**
 * What both sides of a cell derive from it (the worker that runs the subject and the judge that judges
 * it): the validated cell, its model, the per-rank plan and the gradient specs, and the frozen views a
 * subject sees. Nothing here knows the reference.
 */
import type { ParamView, SubjectShape, Tensor } from "../subject/api.ts";
import type { BackendKind } from "../backend/backend.ts";
import { validateLayout, worldSize } from "../layout/layout.ts";
import { getModel } from "../model/models.ts";
import type { ModelManifest } from "../model/manifest.ts";
import { planWorld, type LocalParam } from "../model/plan.ts";
import { regimeSpec } from "../gradients/regimes.ts";
import { gradSpecs } from "../gradients/specs.ts";
import { InputError } from "../errors.ts";
import { DTYPES, type Cell } from "../cell/cell.ts";
import { deepFreeze } from "../util/freeze.ts";

/** What the judge needs to know of a cell besides the cell itself. */
export interface JudgeCellInput {
  cell: Cell;
  backend: BackendKind;
  /** A model given explicitly (a fuzzer's synthetic model) instead of the built-in `cell.model`. */
  model?: ModelManifest;
  /** Each rank's physical copies instead of the model's default plan. */
  plan?: LocalParam[][];
  /** The subject's shape ("optimizer" subjects get raw partials on tied copies). */
  shape?: SubjectShape;
}

/**
 * The default plan of a built-in model on a layout, computed once per realm: the plan is a pure function
 * of both, and a matrix runs many cells (subjects, regimes, dtypes) on each pair.
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

/** The cell's model, plan and gradient specs, validated: the same on both sides of the cell. */
export function cellSetup(input: JudgeCellInput) {
  const layout = validateLayout(input.cell.layout);
  const cell = input.cell.layout === layout ? input.cell : { ...input.cell, layout };
  const world = worldSize(layout);
  const model = input.model ?? getModel(cell.model);
  if (input.model && input.model.name !== cell.model) {
    throw new InputError(`cell.model "${cell.model}" does not name the model given to runCell ("${input.model.name}")`);
  }
  if (!DTYPES.includes(cell.dtype)) throw new InputError(`dtype: "${cell.dtype}" is not one of ${DTYPES.join(", ")}`);
  if (!(cell.normType > 0)) throw new InputError(`norm: ${cell.normType} must be a positive number or inf`);
  const regime = regimeSpec(cell.regime, cell.dtype);
  const step = cell.step ?? 0;
  const seed = BigInt(cell.seed);
  const specs = gradSpecs(model, { dtype: cell.dtype, regime: cell.regime, seed, step, pp: layout.pp, shape: input.shape });
  const plan = input.plan ? deepFreeze(input.plan) : defaultPlan(model, cell);
  if (plan.length !== world) throw new InputError(`the plan given to runCell has ${plan.length} ranks; the layout has ${world}`);
  return { cell, layout, world, model, regime, step, specs, plan };
}

/** Each rank's frozen views of its copies: what a subject's clip sees, and what the checks judge. */
export function paramViews(plan: readonly LocalParam[][], grads: readonly (readonly (Tensor | null)[])[]): ParamView[][] {
  return plan.map((params, rank) =>
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
        grad: grads[rank]![i]!,
      }),
    ),
  );
}


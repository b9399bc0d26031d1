/**
 * The reference clip (SPEC §6): torch.nn.utils.clip_grad_norm_ on the LOGICAL parameters with their
 * full gradients, with the norm computed exactly (one rounding to float64, then to float32).
 *
 * It does not depend on the layout, so it is computed once per (model, dtype, norm type, regime,
 * seed, step) and cached; the clipped tensors are never materialised: each rank's shard is checked
 * against round(float32(g) * coef) by regenerating g (native verifyScaled).
 */
import type { DType } from "../subject/api.ts";
import { normFromPowerSum } from "../numerics/numerics.ts";
import { exactToNumber } from "../backend/exact.ts";
import { referenceKernels } from "../backend/native.ts";
import type { ModelManifest } from "../model/manifest.ts";
import { numel } from "../model/manifest.ts";
import { regimeSpec } from "./regimes.ts";
import type { GenSpec } from "../backend/backend.ts";
import { gradSpecs } from "./specs.ts";

export interface Reference {
  /** S: the exact sum of |g|^p (or max |g| for inf), rounded once to float64. */
  powerSum: number;
  /** S^(1/p) rounded to float32: the reported norm. */
  totalNorm: number;
  /** Logical parameters with a gradient. */
  paramsWithGrad: number;
  /** Their elements: the terms of the power sum (what the fp32-accum bound grows with). */
  elementsWithGrad: number;
}

const cache = new Map<string, Reference>();

export function computeReference(
  model: ModelManifest,
  dtype: DType,
  normType: number,
  regime: string,
  seed: number,
  step: number,
): Reference {
  const key = [model.name, dtype, normType, regime, seed, step].join("|");
  const hit = cache.get(key);
  if (hit) return hit;
  const spec = regimeSpec(regime, dtype);
  const n = referenceKernels();
  let sum = 0n;
  let max = 0;
  let nonfinite = 0;
  let paramsWithGrad = 0;
  let elementsWithGrad = 0;
  let specialDone = spec.special === null;
  // the logical gradients: in `finalize` a tied parameter's is the f32 sum of its copies' partials
  const specs = gradSpecs(model, { dtype, regime, seed, step, pp: 1 });
  for (const p of model.params) {
    if (!spec.hasGrad(p.index)) continue;
    paramsWithGrad++;
    const gen: GenSpec = specs.logical(p);
    if (!specialDone) {
      nonfinite += Math.abs(spec.special!); // |±Inf| or NaN: the exact sum skips it, so account for it here
      specialDone = true;
    }
    const count = numel(p.shape);
    elementsWithGrad += count;
    if (normType === Infinity) {
      const m = n.maxAbsFull(gen, count);
      max = Number.isNaN(m) || Number.isNaN(max) ? NaN : Math.max(max, m);
    } else {
      sum += n.exactFull(gen, count, normType);
    }
  }
  const powerSum = normType === Infinity ? max : exactToNumber({ sum, nonfinite });
  const ref: Reference = { powerSum, totalNorm: normFromPowerSum(powerSum, normType), paramsWithGrad, elementsWithGrad };
  cache.set(key, ref);
  return ref;
}

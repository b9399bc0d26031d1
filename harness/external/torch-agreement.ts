/**
 * The reference clip tied to PyTorch (SPEC §6): for a set of cells, every logical parameter's full gradient
 * goes to one Python process (adapters/torch/agree.py), which
 *   - regenerates the gradients with SPEC §5 in numpy and compares them bit for bit with the native store's;
 *   - runs torch.nn.utils.clip_grad_norm_ in float64: rounded to float32 it must be the exact reference's
 *     norm (and within 1e-12 of S^(1/p) in float64);
 *   - runs it in the gradients' own dtype: float32 within the fp32 class, bfloat16/float16 within bf16, and
 *     every clipped element must be round(float32(g) * c) with c the coefficient torch scaled by (for float32
 *     that c is also the reference's rule, clamp(max_norm / (norm + 1e-6), 1) in float32, from torch's norm).
 * suites/torch/agreement.test.ts asserts all of it and keeps golden/torch-agreement.json.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Backend, type GenSpec } from "../backend/backend.ts";
import { type DType } from "../subject/api.ts";
import { clipCoefficient } from "../numerics/numerics.ts";
import { computeReference, type Reference } from "../gradients/reference.ts";
import { maxNormOf, regimeSpec, type Regime, type RegimeSpec } from "../gradients/regimes.ts";
import { PROJECT_ROOT, torchOptionsFromEnv } from "./torch/options.ts";
import { probeTorch } from "./torch/subject.ts";
import { SINGLE } from "../layout/layout.ts";
import { getModel } from "../model/models.ts";
import { planWorld } from "../model/plan.ts";
import { normTolerance } from "../checks/types.ts";
import { ompThreads } from "../util/env.ts";

export interface AgreementCell {
  model: string;
  dtype: DType;
  normType: number;
  regime: Regime;
  seed: number;
}

const c = (model: string, dtype: DType, normType: number, regime: Regime): AgreementCell => ({ model, dtype, normType, regime, seed: 0 });

/** Both debug models, every norm kind, every dtype, the regimes whose norms differ in kind. */
export const AGREEMENT_CELLS: readonly AgreementCell[] = [
  c("llama3-debug", "f32", 2, "active"),
  c("llama3-debug", "f32", 1, "active"),
  c("llama3-debug", "f32", Infinity, "active"),
  c("llama3-debug", "f32", 3, "active"),
  c("llama3-debug", "f32", 2, "sparse"),
  c("llama3-debug", "f32", 2, "ones"),
  c("llama3-debug", "f32", 2, "inactive"),
  c("llama3-debug", "f32", 2, "zeros"),
  c("llama3-debug", "f32", 2, "nonfinite-inf"),
  c("llama3-debug", "bf16", 2, "active"),
  c("llama3-debug", "bf16", Infinity, "active"),
  c("llama3-debug", "f16", 2, "active"),
  c("deepseek-v3-debug", "f32", 2, "active"),
  c("deepseek-v3-debug", "f32", 1, "active"),
  c("deepseek-v3-debug", "f32", Infinity, "active"),
  c("deepseek-v3-debug", "f32", 2, "boundary"),
  c("deepseek-v3-debug", "f32", 2, "ones"),
  c("deepseek-v3-debug", "bf16", 2, "sparse"),
];

export const agreementId = (x: AgreementCell) => `${x.model}/${x.dtype}/n${x.normType === Infinity ? "inf" : x.normType}/${x.regime}/s${x.seed}`;

export interface AgreementRow {
  id: string;
  cell: AgreementCell;
  maxNorm: number;
  /** The exact reference: S rounded once to float64, the norm rounded to float32, and S^(1/p) in float64. */
  reference: { totalNorm: number; powerSum: number; float64Norm: number };
  generator: { elements: number; mismatches: unknown[] };
  float64: { norm: number; asFloat32: number; relErr: number };
  native: { norm: number; dtype: string; tolerance: "fp32-accum" | "bf16"; relErr: number; within: boolean };
  coef: { torch: number; dtype: string; rule: number; sameAsRule: boolean };
  /** Clipped gradients against round(float32(g) * coef.torch): null when every element matches. */
  tensors: { checked: number; mismatch: string | null };
}

export interface Agreement {
  torch: string;
  numpy: string;
  /** torch's intra-op threads (float32 reductions on CPU depend on them). */
  threads: number;
  rows: AgreementRow[];
  seconds: number;
}

const fromJson = (v: number | string): number => (typeof v === "number" ? v : v === "NaN" ? NaN : v === "Infinity" ? Infinity : -Infinity);
const toJson = (v: number): number | string => (Number.isNaN(v) ? "NaN" : v === Infinity ? "Infinity" : v === -Infinity ? "-Infinity" : v);

function float64Norm(powerSum: number, p: number): number {
  if (p === Infinity || p === 1) return powerSum;
  return p === 2 ? Math.sqrt(powerSum) : powerSum ** (1 / p);
}

function relErr(a: number, b: number): number {
  if (Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)) || a === b) return 0;
  if (!Number.isFinite(a) || !Number.isFinite(b) || b === 0) return Infinity;
  return Math.abs(a - b) / Math.abs(b);
}

/** One cell made ready for agree.py: its gradients written, its job, and what its row is computed from. */
interface PreparedCell {
  cell: AgreementCell;
  ref: Reference;
  maxNorm: number;
  plan: ReturnType<typeof planWorld>[number];
  genOf: (p: { name: string; index: number }) => GenSpec;
  job: { id: string; grads: string; out: string; maxNorm: number; normType: number | "inf"; params: unknown[] };
}

/** What agree.py writes: its versions, and per cell (in job order) what torch returned. */
interface AgreeOutput {
  torch: string;
  numpy: string;
  threads: number;
  cells: {
    id: string;
    generator: { elements: number; mismatches: unknown[] };
    float64: { norm: number | string };
    native: { norm: number | string; dtype: string; coef: number | string; coefDtype: string };
  }[];
}

/**
 * The generator's input for each parameter of the cell: one function, so that the gradients written for torch, the
 * ones numpy regenerates and the ones the clipped tensors are checked against are the same.
 */
function generatorOf(cell: AgreementCell, spec: RegimeSpec, firstWithGrad: number): PreparedCell["genOf"] {
  return (p) => {
    const g: GenSpec = { seed: BigInt(cell.seed), step: 0, name: p.name, dtype: cell.dtype, exp: spec.exp, mode: spec.mode };
    if (spec.special !== null && p.index === firstWithGrad) {
      g.specialIndex = 0;
      g.specialValue = spec.special;
    }
    return g;
  };
}

/** Cell `k`'s reference and job, its gradients written to `dir` by the native store (whose bits agree.py compares with numpy's). */
function prepareCell(cell: AgreementCell, k: number, dir: string): PreparedCell {
  const model = getModel(cell.model);
  const spec = regimeSpec(cell.regime);
  const ref = computeReference(model, cell.dtype, cell.normType, cell.regime, cell.seed, 0);
  const maxNorm = maxNormOf({ ...cell, step: 0 }, ref.totalNorm);
  const firstWithGrad = model.params.find((p) => spec.hasGrad(p.index))?.index ?? -1;
  const genOf = generatorOf(cell, spec, firstWithGrad);
  const plan = planWorld(model, SINGLE)[0]!; // one rank: every logical parameter, full, once
  const backend = new Backend("cpu", 1);
  const grads = join(dir, `in-${k}.safetensors`);
  try {
    const entries = plan
      .filter((p) => spec.hasGrad(p.index))
      .map((p) => {
        const t = backend.alloc(0, cell.dtype, p.block.len);
        backend.fillGrad(t, genOf(p), p.block);
        return { name: p.name, tensor: t };
      });
    backend.saveSafetensors(grads, entries, { cell: agreementId(cell) });
  } finally {
    backend.freeAll();
  }
  return {
    cell,
    ref,
    maxNorm,
    plan,
    genOf,
    job: {
      id: agreementId(cell),
      grads,
      out: join(dir, `out-${k}.safetensors`),
      maxNorm,
      normType: cell.normType === Infinity ? "inf" : cell.normType,
      params: plan.map((p) => {
        const g = genOf(p);
        return {
          name: p.name,
          shape: p.block.globalShape,
          hasGrad: spec.hasGrad(p.index),
          gen: { ...g, seed: String(g.seed), specialValue: g.specialValue === undefined ? undefined : toJson(g.specialValue) },
        };
      }),
    },
  };
}

/** Runs adapters/torch/agree.py on every prepared cell at once (one Python start for the whole set); throws with its stderr's tail when it fails. */
function runAgreePy(python: string, prepared: readonly PreparedCell[], dir: string): AgreeOutput {
  const jobPath = join(dir, "job.json");
  const resultPath = join(dir, "result.json");
  writeFileSync(jobPath, JSON.stringify({ cells: prepared.map((p) => p.job), result: resultPath }));
  const r = spawnSync(python, [join(PROJECT_ROOT, "adapters", "torch", "agree.py"), jobPath], {
    encoding: "utf8",
    env: { ...process.env, OMP_NUM_THREADS: ompThreads("2"), PYTHONDONTWRITEBYTECODE: "1" },
    timeout: 30 * 60_000,
  });
  if (r.status !== 0 || !existsSync(resultPath)) {
    throw new Error(`adapters/torch/agree.py failed (${r.error?.message ?? `exit ${r.status}`}):\n${(r.stderr ?? "").trim().split("\n").slice(-15).join("\n")}`);
  }
  return JSON.parse(readFileSync(resultPath, "utf8")) as AgreeOutput;
}

/** The clipped tensors, read back into a store and checked element by element against the generator: the first mismatch, if any. */
function checkClipped(p: PreparedCell, coef: number): AgreementRow["tensors"] {
  const backend = new Backend("cpu", 1);
  let mismatch: string | null = null;
  let checked = 0;
  try {
    const byName = new Map(p.plan.map((x) => [x.name, x]));
    for (const { name, tensor } of backend.loadSafetensors(p.job.out, 0)) {
      const lp = byName.get(name)!;
      checked++;
      const m = backend.verifyScaled(tensor, p.genOf(lp), lp.block, coef);
      if (m && !mismatch) mismatch = `${name} element ${m.index}: torch ${m.actual}, expected ${m.expected} = round(g * ${coef})`;
    }
  } finally {
    backend.freeAll();
  }
  return { checked, mismatch };
}

/** One cell's row: what torch returned set against the exact reference, the tolerance class and the float32 rule. */
function agreementRow(p: PreparedCell, o: AgreeOutput["cells"][number]): AgreementRow {
  // torch accumulates a float32 gradient's norm in float32 (fp32-accum) and returns a bf16/f16 one in its dtype
  const tolerance = p.cell.dtype === "f32" ? "fp32-accum" : "bf16";
  const n64 = fromJson(o.float64.norm);
  const native = fromJson(o.native.norm);
  const coef = fromJson(o.native.coef);
  const ref64 = float64Norm(p.ref.powerSum, p.cell.normType);
  const nativeErr = relErr(native, p.ref.totalNorm);
  const rule = clipCoefficient(p.maxNorm, native);
  const tensors = checkClipped(p, coef);
  return {
    id: o.id,
    cell: p.cell,
    maxNorm: p.maxNorm,
    reference: { totalNorm: p.ref.totalNorm, powerSum: p.ref.powerSum, float64Norm: ref64 },
    generator: o.generator,
    float64: { norm: n64, asFloat32: Math.fround(n64), relErr: relErr(n64, ref64) },
    native: {
      norm: native,
      dtype: o.native.dtype,
      tolerance,
      relErr: nativeErr,
      within: Number.isFinite(p.ref.totalNorm) ? nativeErr <= normTolerance(tolerance, p.cell.normType, p.ref.elementsWithGrad) : relErr(native, p.ref.totalNorm) === 0,
    },
    coef: { torch: coef, dtype: o.native.coefDtype, rule, sameAsRule: relErr(coef, rule) === 0 },
    tensors,
  };
}

/** Runs the agreement for `cells` (one Python process). Throws InputError when torch is missing. */
export function runAgreement(cells: readonly AgreementCell[] = AGREEMENT_CELLS): Agreement {
  const python = torchOptionsFromEnv().python;
  probeTorch(python, {}, "the agreement with PyTorch");
  const started = performance.now();
  const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "clip-parity-agree-"));
  try {
    const prepared = cells.map((cell, k) => prepareCell(cell, k, dir));
    const out = runAgreePy(python, prepared, dir);
    const rows = prepared.map((p, k) => agreementRow(p, out.cells[k]!));
    return { torch: out.torch, numpy: out.numpy, threads: out.threads, rows, seconds: (performance.now() - started) / 1000 };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The golden record of an agreement run: what torch returned, per cell, with the torch version. */
export function agreementGolden(a: Agreement): Record<string, unknown> {
  return {
    header: {
      producedBy: "suites/torch/agreement.test.ts (CLIP_PARITY_UPDATE_GOLDEN=1 to rewrite; never in CI)",
      torch: a.torch,
      numpy: a.numpy,
      threads: a.threads,
      generator: "SPEC §5 splitmix64, regenerated in numpy by adapters/torch/gen.py",
      what:
        "torch.nn.utils.clip_grad_norm_ on every logical parameter's full gradient, one rank: float64 (must round to the exact " +
        "reference's float32 norm) and the gradients' own dtype (fp32 / bf16 class), plus the coefficient torch scaled by",
      cells: a.rows.length,
    },
    cells: Object.fromEntries(
      a.rows.map((r) => [
        r.id,
        {
          maxNorm: toJson(r.maxNorm),
          referenceNorm: toJson(r.reference.totalNorm),
          torchFloat64Norm: toJson(r.float64.norm),
          torchFloat64AsFloat32: toJson(r.float64.asFloat32),
          torchNativeNorm: toJson(r.native.norm),
          torchNativeDtype: r.native.dtype,
          nativeRelErr: toJson(r.native.relErr),
          nativeWithinClass: `${r.native.tolerance}: ${r.native.within}`,
          torchCoef: toJson(r.coef.torch),
          torchCoefDtype: r.coef.dtype,
          coefSameAsFloat32Rule: r.coef.sameAsRule,
          tensorsMatchTorchCoef: r.tensors.mismatch === null,
          generatorElements: r.generator.elements,
          generatorMismatches: r.generator.mismatches.length,
        },
      ]),
    ),
  };
}

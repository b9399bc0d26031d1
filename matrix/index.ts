/**
 * Matrices: what to run. A matrix is a named list of cases (a cell without its subject) and the
 * subjects to run on every case; user matrices are JSON files validated here with clear errors.
 */
import { existsSync, statSync } from "node:fs";
import { z } from "zod";
import type { DType } from "../harness/subject/api.ts";
import { ALL_REGIMES, boundaryOffset, REGIMES, type Regime } from "../harness/gradients/regimes.ts";
import { InputError } from "../harness/errors.ts";
import { didYouMean } from "../harness/util/did-you-mean.ts";
import { formatLayout, parseLayout, validateLayout, type Layout } from "../harness/layout/layout.ts";
import { MODEL_NAMES } from "../harness/model/models.ts";
import { cellId, DTYPES, formatNorm, type Case, type Matrix } from "../harness/cell/cell.ts";
import { DEFAULT_LIMITS } from "../harness/run/policy.ts";
import { CORRECT_SUBJECTS, OPTIMIZER_SUBJECTS } from "../harness/registry/registry.ts";
import { finalizeMatrix } from "./finalize.ts";
import { readJsonFile } from "../harness/util/json-file.ts";

export type { Case, Matrix } from "../harness/cell/cell.ts";

const DEBUG_MODELS = ["llama3-debug", "deepseek-v3-debug"] as const;
const NORMS = [2, 1, Infinity] as const;
/** Every norm type the clip corners cover: the three torch special-cases and two general p. */
export const CORNER_NORMS = [2, 1, Infinity, 1.5, 3] as const;

/**
 * Layouts of world sizes 1 to 8 for the cpu matrix: every axis alone, the gpu4 shapes, HSDP, EP
 * sharing ranks with FSDP/TP, PP stages that own no expert layer (pp4+ on deepseek-v3-debug: stage 0
 * holds only the dense layer 0), empty stages (pp7, pp8 on 6 layers) and uneven shards (tp3, dp_shard5,
 * tp7: 256 and 2048 do not divide).
 */
export const CPU_LAYOUTS = [
  "single",
  "dp_shard2", "tp2", "pp2", "dp_replicate2", "cp2", "dp_shard2,ep2",
  "tp3", "dp_shard3", "pp3",
  "pp2,dp_shard2,ep2", "pp4", "dp_shard2,tp2", "dp_replicate2,dp_shard2", "pp2,tp2", "tp4", "dp_shard4,ep4", "cp2,tp2,ep2",
  "dp_shard5", "pp5",
  "pp2,tp3", "dp_shard3,tp2,ep2", "pp6",
  "tp7", "pp7",
  "pp2,dp_shard2,tp2,ep2", "pp8", "dp_replicate2,dp_shard2,tp2", "pp4,dp_shard2,ep2", "dp_shard8,ep8", "pp2,cp2,tp2",
];

export const GPU_LAYOUTS: Record<"gpu1" | "gpu4" | "gpu8", string[]> = {
  gpu1: ["single"],
  gpu4: ["pp2,dp_shard2,ep2", "pp4", "dp_shard2,tp2", "dp_replicate2,dp_shard2", "pp2,tp2", "tp4", "dp_shard4,ep4"],
  gpu8: ["pp2,dp_shard2,tp2,ep2", "pp8", "dp_shard4,tp2,ep4", "dp_replicate2,dp_shard2,tp2", "pp4,dp_shard2,ep2", "tp8", "dp_shard8,ep8", "pp2,tp4"],
};

function dtypeAt(i: number): DType {
  return i % 2 === 0 ? "f32" : "bf16";
}

/**
 * A sweep that covers every layout with both models at norm 2 in the `active` regime (where every
 * known bug shows), plus every (layout, model, norm) once with a rotating regime and dtype, so each
 * regime meets many layouts without a full cartesian product.
 */
function sweep(layouts: string[], seed: number, norms: readonly number[] = NORMS): Case[] {
  const cases: Case[] = [];
  const seen = new Set<string>();
  const push = (c: Case) => {
    const id = cellId({ subject: "", ...c });
    if (!seen.has(id)) cases.push(c);
    seen.add(id);
  };
  layouts.forEach((spec, k) => {
    const layout = parseLayout(spec);
    DEBUG_MODELS.forEach((model, mi) => {
      push({ layout, model, dtype: "f32", normType: 2, regime: "active", seed });
      norms.forEach((normType, ni) => {
        const regime = REGIMES[(k * 3 + ni * 4 + mi * 5) % REGIMES.length];
        push({ layout, model, dtype: dtypeAt(k + ni + mi), normType, regime, seed });
      });
    });
  });
  return cases;
}

/**
 * max_norm for a clip with a small norm (the `inactive` regime's gradients, e = -20) and clip_coef < 1,
 * per norm type: about half the smaller debug model's norm (the other's is larger), so the coefficient
 * lies well inside (0, 1) and torch's `+ 1e-6` still moves the float32 norm.
 */
export const SMALL_NORM_MAX: Record<string, number> = { "2": 2 ** -11, "1": 1, inf: 2 ** -21, "1.5": 2 ** -7, "3": 2 ** -15 };
/** max_norm for a clip with a large norm (e = 0): 1 clips every p but inf, whose norm is just under 1. */
export const LARGE_NORM_MAX: Record<string, number> = { "2": 1, "1": 1, inf: 0.5, "1.5": 1, "3": 1 };

/**
 * The clip corners (issue 14): for every dtype and every p in CORNER_NORMS, a clip with clip_coef < 1
 * on a large norm (`active`) and on a small norm (`inactive` with a max_norm below its norm), plus an
 * `inactive` clip (clip_coef = 1) for every p. Bugs that only show where the coefficient or the norm's
 * rounding is visible (a missing + 1e-6, a float64 norm, a general-p root) are caught here. The layouts
 * rotate, so each corner meets a different parallel layout; the model is the smaller debug model.
 */
function clipCorners(layouts: readonly string[], seed: number): Case[] {
  const cases: Case[] = [];
  let k = 0;
  // llama3-debug: a sixth of deepseek-v3-debug's elements, and general-p power sums are the costly ones
  const at = () => ({ layout: parseLayout(layouts[k++ % layouts.length]!), model: "llama3-debug" });
  for (const dtype of DTYPES) {
    for (const normType of CORNER_NORMS) {
      const n = formatNorm(normType);
      cases.push({ ...at(), dtype, normType, regime: "active", seed, maxNorm: LARGE_NORM_MAX[n]! });
      cases.push({ ...at(), dtype, normType, regime: "inactive", seed, maxNorm: SMALL_NORM_MAX[n]! });
    }
  }
  for (const normType of CORNER_NORMS) cases.push({ ...at(), dtype: "f32", normType, regime: "inactive", seed });
  return cases;
}

/** The layouts the clip corners rotate over: every mesh axis, uneven shards, expert-less and tied stages. */
const CORNER_LAYOUTS = ["pp2,tp2", "dp_shard2,ep2", "tp3", "pp4", "dp_replicate2,dp_shard2", "cp2,tp2,ep2", "dp_shard3,tp2,ep2", "pp2,dp_shard2,ep2", "dp_shard5"];

/** Cases that exercise error_if_nonfinite=False too (NaN/Inf propagate through the scaling). */
function nonfiniteNoError(layouts: string[], seed: number): Case[] {
  return layouts.flatMap((spec) =>
    (["nonfinite-inf", "nonfinite-nan"] as const).map((regime) => ({
      layout: parseLayout(spec),
      model: "llama3-debug",
      dtype: "f32" as DType,
      normType: 2,
      regime,
      seed,
      errorIfNonfinite: false,
    })),
  );
}

/**
 * -Inf in a gradient (issue 22): a signed max for the inf-norm, or a non-finite test on a signed value,
 * sees a finite norm where |g| has an infinite one. Both norms, with and without error_if_nonfinite.
 */
function negativeInfinity(layouts: string[], seed: number): Case[] {
  return layouts.flatMap((spec) =>
    [2, Infinity].flatMap((normType) =>
      [true, false].map((errorIfNonfinite) => ({ layout: parseLayout(spec), model: "llama3-debug", dtype: "f32" as DType, normType, regime: "nonfinite-neginf" as Regime, seed, errorIfNonfinite })),
    ),
  );
}

/**
 * max_norm exactly on a small norm, one float32 ulp above it (twice on llama3-debug) and below it (issue 22), for every finite p
 * of CORNER_NORMS on both debug models: the `boundary-small` regime, whose offset is drawn per cell, on
 * the first layouts of `layouts` (at `seed`, then the next seeds) that draw 0, +1 and a negative offset. Drawing the layouts (a hash, no
 * reference) keeps building the matrix cheap; the offset stays a property of the cell, not of its id.
 */
export function boundarySmallCorners(layouts: readonly string[], seed: number): Case[] {
  const cases: Case[] = [];
  const [on, above, below] = [(u: number) => u === 0, (u: number) => u === 1, (u: number) => u < 0];
  for (const normType of CORNER_NORMS.filter((p) => Number.isFinite(p))) {
    for (const model of DEBUG_MODELS) {
      // one ulp above deepseek-v3-debug's 1-norm (about 8) the + 1e-6 no longer clips: llama3-debug takes two
      const wanted = model === "llama3-debug" ? [on, above, above, below] : [on, above, below];
      const taken = new Set<object>();
      const drawn = [seed, seed + 1, seed + 2].flatMap((s) =>
        layouts.map((spec) => {
          const c: Case = { layout: parseLayout(spec), model, dtype: "f32", normType, regime: "boundary-small", seed: s };
          return { c, ulps: boundaryOffset(c) };
        }),
      );
      for (const want of wanted) {
        const hit = drawn.find((d) => want(d.ulps) && !taken.has(d));
        if (!hit) throw new Error(`internal: no layout of ${layouts.join(" ")} draws the wanted boundary offset for ${model} p=${formatNorm(normType)}`);
        taken.add(hit);
        cases.push(hit.c);
      }
    }
  }
  return cases;
}

/**
 * NaN with error_if_nonfinite=False for every norm type of CORNER_NORMS (issue 22): torch multiplies every
 * gradient by a NaN coefficient there, so a `clip_coef < 1` guard (false for NaN) that leaves them as
 * they were shows. On both debug models, the layouts rotating.
 */
function nanNoError(layouts: readonly string[], seed: number): Case[] {
  let k = 0;
  return CORNER_NORMS.flatMap((normType) =>
    DEBUG_MODELS.map((model) => ({ layout: parseLayout(layouts[k++ % layouts.length]!), model, dtype: "f32" as DType, normType, regime: "nonfinite-nan" as Regime, seed, errorIfNonfinite: false })),
  );
}

/**
 * Partial(sum) gradients (issue 22): sequence parallel's norm weights Partial over tp
 * (llama3-debug-sp) and every gradient Partial over dp_replicate (llama3-debug-unreduced), on layouts
 * where those axes have 2 or 4 ranks (two partials and zeros) or 1 (the one rank holds the logical
 * gradient). A clip that takes a Partial gradient's norm as if it were a Shard's is caught on the
 * unreduced cells with dp_replicate2 (its norm is that of the partials side by side, not of their sum).
 */
function partialGradients(seed: number): Case[] {
  const c = (layout: string, model: string, dtype: DType, normType: number, regime: Regime): Case => ({ layout: parseLayout(layout), model, dtype, normType, regime, seed });
  const sp = "llama3-debug-sp";
  const unreduced = "llama3-debug-unreduced";
  return [
    c("tp2", sp, "f32", 2, "active"),
    c("pp2,tp2", sp, "bf16", 1, "active"),
    c("dp_shard2,tp2", sp, "f32", Infinity, "sparse"),
    c("tp4", sp, "f32", 2, "boundary"),
    c("single", sp, "f32", 2, "active"),
    c("pp2,cp2,tp2", sp, "f16", 2, "nonfinite-nan"),
    c("dp_replicate2", unreduced, "f32", 2, "active"),
    c("dp_replicate2", unreduced, "bf16", Infinity, "active"),
    c("dp_replicate2,dp_shard2", unreduced, "f32", 1, "sparse"),
    c("dp_replicate2,dp_shard2,tp2", unreduced, "bf16", 2, "active"),
    c("dp_replicate2,tp2", unreduced, "f32", 2, "inactive"),
    c("dp_replicate2", unreduced, "f32", Infinity, "nonfinite-inf"),
    c("pp2", unreduced, "f32", 2, "active"),
  ];
}

/** The layouts the `tiny` cases run on: every one has a sum reduction over 2+ ranks (shards, stages, experts, TP). */
export const TINY_LAYOUTS = ["dp_shard2", "tp2", "pp2", "dp_shard2,tp2", "pp2,dp_shard2,ep2"] as const;

/**
 * The `tiny` regime (issue 53; SPEC §5): e = -40 and max_norm = 2^-40, float32 and bfloat16 (float16 cannot
 * hold them), norms 2, 1 and 3 on llama3-debug, on layouts whose norm sums partial norms over several
 * ranks: a clip that adds torch's 1e-6 to each rank's partial norm before the reduction, instead of once
 * to the reduced norm, scales by another coefficient there (up to k^(1/p) times too small for k partial
 * norms). deepseek-v3-debug on the last layout (experts: the EP groups' sums too). Then where the 1e-6 is
 * added once whatever the clip does (`extra`: one rank, or the inf-norm's MAX), which correct subjects
 * must pass as well.
 */
export function tinyCases(layouts: readonly string[], seed: number, extra: readonly { layout: string; dtype: DType; normType: number }[] = []): Case[] {
  const tiny = (layout: string, model: string, dtype: DType, normType: number): Case => ({ layout: parseLayout(layout), model, dtype, normType, regime: "tiny", seed });
  return [
    ...layouts.flatMap((spec, k) =>
      (["f32", "bf16"] as const).flatMap((dtype) =>
        [2, 1, 3].flatMap((normType) => [
          tiny(spec, "llama3-debug", dtype, normType),
          ...(k === layouts.length - 1 ? [tiny(spec, "deepseek-v3-debug", dtype, normType)] : []),
        ]),
      ),
    ),
    ...extra.map((e) => tiny(e.layout, "llama3-debug", e.dtype, e.normType)),
  ];
}

/** Tiny cells where the 1e-6 is added once by any clip: one rank, MAX over several, a sum over none (dp_replicate2: Replicate only). */
const TINY_ONCE = [
  { layout: "single", dtype: "f32", normType: 2 },
  { layout: "dp_shard2", dtype: "bf16", normType: Infinity },
  { layout: "dp_replicate2", dtype: "f32", normType: 1 },
] as const;

/** The cases in order, each cell id once (a corner may coincide with a sweep case). */
export function uniqueCases(cases: readonly Case[]): Case[] {
  const seen = new Set<string>();
  return cases.filter((c) => {
    const id = cellId({ subject: "", ...c });
    return !seen.has(id) && Boolean(seen.add(id));
  });
}

function builtin(): Record<string, Matrix> {
  return {
    cpu: {
      name: "cpu",
      description: "world sizes 1 to 8, both debug models, f32 and bf16, norms 2, 1 and inf, every regime; clip corners in every dtype for p 2, 1, inf, 1.5, 3; the finalize cells; max_norm on, just above and just below a small norm for every finite p; NaN without error for every p; Partial(sum) gradients; the tiny regime (norm far below the clip's 1e-6) on layouts that sum partial norms of several ranks",
      backend: "cpu",
      cases: uniqueCases([
        ...sweep(CPU_LAYOUTS, 0),
        ...nonfiniteNoError(["single", "pp2,tp2", "dp_shard3"], 0),
        ...negativeInfinity(["single", "pp2,tp2", "dp_shard3"], 0),
        ...clipCorners(CORNER_LAYOUTS, 0),
        // tied copies with their own partial gradients: where an optimizer-owned clipper's finalize shows
        ...finalizeMatrix().cases,
        ...boundarySmallCorners(CPU_LAYOUTS, 0),
        ...nanNoError(CORNER_LAYOUTS.slice(2), 0),
        // appended last, so that every earlier cell keeps its place
        ...partialGradients(0),
        ...tinyCases(TINY_LAYOUTS, 0, TINY_ONCE),
      ]),
      // every correct subject, the optimizer-owned one too: its train and resume sections run with it (cli/run.ts)
      subjects: [...CORRECT_SUBJECTS, ...OPTIMIZER_SUBJECTS],
    },
    gpu1: { name: "gpu1", description: "one rank", backend: "cuda", cases: sweep(GPU_LAYOUTS.gpu1, 0) },
    gpu4: {
      name: "gpu4",
      description: "4 ranks: PP2/DP2/EP2, PP4/EP1, FSDP2xTP2, HSDP 2x2, PP2xTP2, TP4, EP4",
      backend: "cuda",
      cases: sweep(GPU_LAYOUTS.gpu4, 0),
    },
    gpu8: { name: "gpu8", description: "8 ranks", backend: "cuda", cases: sweep(GPU_LAYOUTS.gpu8, 0) },
    nightly: {
      name: "nightly",
      description: "everything: the cpu layouts and world-16 layouts, every regime, f16 too, three seeds, Partial(sum) gradients, the tiny regime",
      backend: "cpu",
      cases: uniqueCases([
        ...[0, 1, 2].flatMap((seed) => sweep(CPU_LAYOUTS, seed)),
        ...[0, 1, 2].flatMap((seed) => clipCorners(CPU_LAYOUTS, seed)),
        ...sweep(["pp2,dp_shard2,tp2,ep4", "dp_replicate2,dp_shard2,tp4", "pp4,dp_shard4,ep4", "pp2,cp2,tp4,ep2", "tp16", "dp_shard16,ep16"], 0),
        ...CPU_LAYOUTS.flatMap((spec) =>
          REGIMES.map((regime) => ({ layout: parseLayout(spec), model: "llama3-debug", dtype: "f16" as DType, normType: 2, regime, seed: 0 })),
        ),
        ...nonfiniteNoError(CPU_LAYOUTS, 0),
        ...[0, 3, 6].flatMap((seed) => boundarySmallCorners(CPU_LAYOUTS, seed)),
        ...nanNoError(CPU_LAYOUTS, 0),
        ...[0, 1, 2].flatMap((seed) => partialGradients(seed)),
        ...[0, 1, 2].flatMap((seed) => tinyCases(["pp4", "dp_shard4,ep4", "dp_replicate2,dp_shard2", ...TINY_LAYOUTS], seed, TINY_ONCE)),
      ]),
    },
  };
}

let matrices: Record<string, Matrix> | undefined;

export function builtinMatrices(): Record<string, Matrix> {
  return (matrices ??= builtin());
}

export const MATRIX_NAMES = ["cpu", "gpu1", "gpu4", "gpu8", "nightly"] as const;

// ---- user matrix files -------------------------------------------------------------------------

/** A listed case takes about 150 bytes of JSON: 64 MiB is far beyond any hand-written matrix. */
const MAX_MATRIX_FILE_BYTES = 64 * 1024 * 1024;

/** One of `values`; an error that names the value, what it is not, the allowed values and the nearest of them. */
const choice = <T extends string>(what: string, values: readonly T[]) =>
  z.enum(values as unknown as [T, ...T[]], {
    error: (iss) => `${JSON.stringify(iss.input)} is not ${what}: expected one of ${values.join(", ")}${typeof iss.input === "string" ? didYouMean(iss.input, values) : ""}`,
  });
const normSchema = z.unknown().transform((v, ctx) => {
  if (v === "inf") return Infinity;
  if (typeof v === "number" && v > 0 && Number.isFinite(v)) return v;
  ctx.addIssue({ code: "custom", message: `${JSON.stringify(v)} is not a norm type: expected a positive number or "inf"` });
  return z.NEVER;
});
const layoutSchema = z.string().transform((s, ctx) => {
  try {
    return parseLayout(s);
  } catch (err) {
    ctx.addIssue({ code: "custom", message: (err as Error).message });
    return z.NEVER;
  }
});
const modelSchema = choice("a model", MODEL_NAMES);
const dtypeSchema = choice("a dtype", DTYPES);
const regimeSchema = choice("a regime", ALL_REGIMES);

// `normType` is the name the library and the results use; `norm` (the CLI's flag) is accepted as well, not both.
const caseSchema = z
  .strictObject({
    layout: layoutSchema,
    model: modelSchema,
    dtype: dtypeSchema,
    normType: normSchema.optional(),
    norm: normSchema.optional(),
    regime: regimeSchema,
    seed: z.number().int().nonnegative().default(0),
    maxNorm: z.number().positive().optional(),
    errorIfNonfinite: z.boolean().optional(),
  })
  .superRefine((c, ctx) => {
    if (c.normType === undefined && c.norm === undefined) ctx.addIssue({ code: "custom", path: ["normType"], message: 'missing: a case needs its norm type (a positive number or "inf")' });
    if (c.normType !== undefined && c.norm !== undefined) ctx.addIssue({ code: "custom", path: ["norm"], message: "give normType or norm, not both (they are one field)" });
  });

const sweepSchema = z
  .strictObject({
    layouts: z.array(layoutSchema).min(1),
    models: z.array(modelSchema).min(1),
    dtypes: z.array(dtypeSchema).min(1).default(["f32"]),
    normTypes: z.array(normSchema).min(1).optional(),
    norms: z.array(normSchema).min(1).optional(),
    regimes: z.array(regimeSchema).min(1).default(["active"]),
    seeds: z.array(z.number().int().nonnegative()).min(1).default([0]),
  })
  .superRefine((s, ctx) => {
    if (s.normTypes !== undefined && s.norms !== undefined) ctx.addIssue({ code: "custom", path: ["norms"], message: "give normTypes or norms, not both (they are one field)" });
  });

export const matrixFileSchema = z
  .strictObject({
    name: z.string().min(1),
    description: z.string().default(""),
    backend: z.enum(["cpu", "cuda"]).default("cpu"),
    subjects: z.array(z.string().min(1)).optional(),
    budgets: z
      .strictObject({ scratchBytes: z.number().int().nonnegative().optional(), collectives: z.number().int().positive().optional() })
      .optional(),
    cases: z.array(caseSchema).optional(),
    sweep: sweepSchema.optional(),
  })
  .refine((m) => m.cases || m.sweep, { message: "a matrix needs `cases`, `sweep` or both" });

/**
 * A matrix file, validated (errors name the file, the field path and the value). A sweep is counted
 * before it is expanded: one that would make more than `maxCases` cases is refused, not built.
 */
export function loadMatrixFile(path: string, maxCases = DEFAULT_LIMITS.maxCells): Matrix {
  const bytes = existsSync(path) ? statSync(path).size : 0;
  if (bytes > MAX_MATRIX_FILE_BYTES) {
    throw new InputError(`matrix file ${path}: ${bytes.toLocaleString("en-US")} bytes is over the limit of ${MAX_MATRIX_FILE_BYTES.toLocaleString("en-US")} for a matrix file (use a sweep)`);
  }
  const m = readJsonFile(matrixFileSchema, path, `matrix file ${path}`);
  const cases: Case[] = (m.cases ?? []).map((c) => ({
    layout: c.layout,
    model: c.model,
    dtype: c.dtype,
    normType: (c.normType ?? c.norm)!,
    regime: c.regime as Regime,
    seed: c.seed,
    ...(c.maxNorm !== undefined ? { maxNorm: c.maxNorm } : {}),
    ...(c.errorIfNonfinite !== undefined ? { errorIfNonfinite: c.errorIfNonfinite } : {}),
  }));
  if (m.sweep) {
    const s = m.sweep;
    const norms = s.normTypes ?? s.norms ?? [2];
    const sizes = [s.layouts.length, s.models.length, s.dtypes.length, norms.length, s.regimes.length, s.seeds.length];
    const count = sizes.reduce((a, b) => a * b, 1);
    if (count + cases.length > maxCases) {
      throw new InputError(
        `matrix file ${path}: its sweep makes ${sizes.join(" x ")} = ${count.toLocaleString("en-US")} cases` +
          `${cases.length ? ` (+${cases.length} listed)` : ""}, over the limit of ${maxCases.toLocaleString("en-US")} (raise it with --max-cells N)`,
      );
    }
    for (const layout of s.layouts)
      for (const model of s.models)
        for (const dtype of s.dtypes)
          for (const normType of norms)
            for (const regime of s.regimes)
              for (const seed of s.seeds) cases.push({ layout, model, dtype, normType, regime: regime as Regime, seed });
  }
  return { name: m.name, description: m.description, backend: m.backend, cases, subjects: m.subjects, budgets: m.budgets };
}

/** A built-in matrix name, or a path to a JSON matrix file. */
export function resolveMatrix(nameOrPath: string, maxCases = DEFAULT_LIMITS.maxCells): Matrix {
  const named = Object.hasOwn(builtinMatrices(), nameOrPath) ? builtinMatrices()[nameOrPath] : undefined;
  if (named) return named;
  if (/[\\/]|\.json$/.test(nameOrPath)) return loadMatrixFile(nameOrPath, maxCases);
  throw new InputError(`--matrix: "${nameOrPath}" is neither a built-in matrix (${MATRIX_NAMES.join(", ")}) nor a .json file${didYouMean(nameOrPath, MATRIX_NAMES)}`);
}

export { cellsOf } from "../harness/cell/cell.ts";

export function describeLayout(l: Layout): string {
  return formatLayout(validateLayout(l));
}

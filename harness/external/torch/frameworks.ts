/**
 * Calling conventions of real training frameworks, declared per framework in adapters/torch/frameworks/
 * NAME.json and validated here; the adapter receives the validated convention in every job
 * (protocol.ts) and builds the call from it, never from guesses about the target's signature.
 *
 * A convention says what the target is called with (parameters, a model object, gradients, local
 * tensors), which keyword arguments, and how each layout-dependent one is derived the way the
 * framework's trainer derives it (ARG_SOURCES in protocol.ts); a framework with several code paths
 * (transformers' Trainer) lists them with the predicate of its own that picks one.
 *
 * The rule for the cell's own clip parameters: max_norm, norm_type and error_if_nonfinite are passed
 * whenever the framework's function takes them, so every cell exercises the same function. A framework
 * whose functions take no norm_type clips by the 2-norm only, and one that takes no error_if_nonfinite
 * cannot be asked to raise: cells that ask for either are not applicable to it (`applicability`).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { InputError } from "../../errors.ts";
import { LAYOUT_AXES, type Layout, type LayoutAxis } from "../../layout/layout.ts";
import { getModel } from "../../model/models.ts";
import { stageOfParam } from "../../model/plan.ts";
import { regimeSpec } from "../../gradients/regimes.ts";
import type { Case } from "../../cell/cell.ts";
import type { DType } from "../../subject/api.ts";
import { ADAPTER_DIR, PROJECT_ROOT } from "./options.ts";
import { conventionSchema, type Arg, type Convention } from "./protocol.ts";
import { parseJsonText } from "../../util/json-file.ts";

export const FRAMEWORKS_DIR = join(ADAPTER_DIR, "frameworks");
/** Where a finding's script lives, relative to the project root (a framework file's `findings[].script`). */
const FINDING_SCRIPT_RE = /^adapters\/torch\/findings\/[A-Za-z0-9_]+\.py$/;
export const FRAMEWORK_NAME_RE = /^[a-z][a-z0-9-]*$/;

/**
 * What the framework's trainer builds and asks of its clip (read from its sources; `why` quotes them). A
 * cell outside is still run, but reported apart from the failures (docs/frameworks.md): a failure there is
 * not one its maintainers would accept, since their trainer never gets there. Every field defaults to
 * "anything the harness builds".
 */
export const configurationsSchema = z.strictObject({
  why: z.string().min(1),
  /** Mesh axes the trainer may have with more than one rank (the others are 1). */
  axes: z.array(z.enum(LAYOUT_AXES)).optional(),
  /** Whether it builds an MTP layer (a tied replica of the embedding on the last stage) together with PP. */
  mtpWithPp: z.boolean().default(true),
  /** The gradient dtypes its clip is given. */
  dtypes: z.array(z.enum(["f32", "bf16", "f16"])).optional(),
  /** The norm types the trainer asks for (one that passes no norm_type asks for its default). */
  normTypes: z.array(z.union([z.number().positive(), z.literal("inf")])).optional(),
  /** Whether the trainer ever asks the clip to raise on a non-finite norm. */
  errorIfNonfinite: z.boolean().default(true),
  /**
   * Whether the trainer calls its clip when the norm is non-finite; false: it checks the norm first and skips the
   * step (DeepSpeed's optimizers on overflow), so a cell whose norm is non-finite is not a call it makes.
   */
  nonfiniteNorms: z.boolean().default(true),
  /**
   * Whether the trainer may build a pipeline stage that holds no parameter (the harness's stage rule leaves one
   * empty when there are more stages than layers to spread); false: its pipeline gives every stage a layer.
   */
  emptyStages: z.boolean().default(true),
  /** "cuda": the clip runs on CUDA devices only; on the cpu backend its cells cannot run here. */
  needs: z.literal("cuda").optional(),
});
export type Configurations = z.infer<typeof configurationsSchema>;

export const frameworkSchema = z.strictObject({
  $comment: z.string().optional(),
  name: z.string().regex(FRAMEWORK_NAME_RE),
  /** One line, for `clip-parity list subjects`. */
  description: z.string().min(1),
  /** The pip distribution whose version the tables report. */
  package: z.string().min(1),
  /** Modules that must import for the framework to be usable (probed before anything runs). */
  imports: z.array(z.string().regex(/^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$/)).min(1),
  /** Where the framework's trainer clips, quoted from its source. */
  trainer: z.string().min(1),
  convention: conventionSchema,
  configurations: configurationsSchema.optional(),
  /**
   * What a release of the framework needs installed beside it when it runs in an environment of its own pins
   * (environments.ts; `torch:torchrec@torchrec==1.3.0,fbgemm-gpu-cpu==1.3.0,torch==2.8.0`): further requirements,
   * `PKG` or `PKG==VER`, resolved together with the pins (so under their torch), and the distributions installed
   * with --no-deps (pins or requirements: torchrec, whose metadata asks for the CUDA-only fbgemm-gpu where the pins
   * name its CPU build). Part of the environment's cache key; the pinned .venv is set up by `npm run setup:torch`.
   */
  install: z
    .strictObject({
      requires: z.array(z.string().regex(/^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:==[0-9][A-Za-z0-9.+]*)?$/, "expected PKG or PKG==VERSION")).default([]),
      noDeps: z.array(z.string().regex(/^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$/, "expected a distribution name")).default([]),
      why: z.string().min(1),
    })
    .optional(),
  /**
   * The scratch its clip takes by design, when more than SPEC's default budget allows (a float32 copy of the
   * rank's largest local shard): a copy of `bytesPerElement` bytes per element of the largest local shard or of the
   * largest whole parameter the rank holds (an engine that flattens parameters partitions its own way), or of
   * the rank's largest flat parameter shard (FSDP1: each wrapped block's parameters concatenated and split over
   * dp_shard), plus 1 MiB; `why` quotes the source. Still far below a replica of every gradient, which
   * memory.peak is for; except "rank's parameters": a copy of every parameter the rank holds (a mixed-precision
   * optimizer's float32 master gradients), for a framework that keeps every gradient whole on every rank anyway.
   */
  scratch: z
    .strictObject({ bytesPerElement: z.number().int().positive(), of: z.enum(["local shard", "parameter", "flat parameter shard", "rank's parameters"]), why: z.string().min(1) })
    .optional(),
  /**
   * docs/frameworks.md's one-line explanation of a failure cause (harness/external/frameworks-run.ts
   * CAUSES) for this framework, from reading its code: cause key, or a key prefix such as
   * "raises:AssertionError", to text. Causes without one get the generic line.
   */
  explain: z.record(z.string().min(1), z.string().min(1)).default({}),
  /**
   * A cause shown through the framework's own entry point (deepspeed.initialize, engine.step, a pipeline's
   * train_batch), where the cells call the functions under it: a standalone script in adapters/torch/findings/
   * (torch and the framework alone) and the torchrun runs of it the page shows, each rank's one line recorded by
   * `npm run frameworks` (findings-run.ts). `cause` is the explain key of the cause it shows.
   */
  findings: z
    .array(
      z.strictObject({
        cause: z.string().min(1),
        script: z.string().regex(FINDING_SCRIPT_RE, "expected adapters/torch/findings/<name>.py"),
        why: z.string().min(1),
        runs: z
          .array(z.strictObject({ label: z.string().min(1), nprocPerNode: z.number().int().min(1).max(8), args: z.array(z.string().min(1)).default([]) }))
          .min(1),
      }),
    )
    .default([]),
});
export type Framework = z.infer<typeof frameworkSchema>;

/** The convention of a plain `torch:<module>:<function>`: the signature of torch.nn.utils.clip_grad_norm_. */
export function plainConvention(target: string): Convention {
  return conventionSchema.parse({
    paths: [
      {
        name: "call",
        when: "always",
        steps: [
          {
            target,
            args: ["params", "max_norm", "norm_type"],
            ifNamed: {
              error_if_nonfinite: "error_if_nonfinite",
              foreach: "foreach",
              pp_mesh: "pp_mesh",
              // The harness always puts experts on a mesh of their own (also at ep = 1), so a target that
              // takes ep_enabled is told whether there are experts; torch:torchtitan derives it as
              // torchtitan's trainer does and moves the experts to the dense mesh at ep = 1.
              ep_enabled: "experts_present",
            },
            why: "torch:<module>:<function>: fn(parameters, max_norm, norm_type), plus error_if_nonfinite, foreach, pp_mesh and ep_enabled when the signature names them",
          },
        ],
      },
    ],
  });
}

let cache: Map<string, Framework> | undefined;

/** Parses one framework file; InputError naming the file and the field otherwise. */
export function parseFrameworkFile(path: string, text: string): Framework {
  const fw = parseJsonText(frameworkSchema, text, `framework file ${path}`);
  const file = path.split("/").pop()!;
  if (file !== `${fw.name}.json`) throw new InputError(`framework file ${path}: its name is "${fw.name}", so the file must be ${fw.name}.json`);
  checkResults(path, fw.convention);
  checkFindings(path, fw);
  return fw;
}

/** A finding shows a cause the file explains, with a script that exists. */
function checkFindings(path: string, fw: Framework): void {
  fw.findings.forEach((f, i) => {
    if (fw.explain[f.cause] === undefined) {
      const causes = Object.keys(fw.explain).filter((k) => !k.includes("#"));
      throw new InputError(`framework file ${path}: findings[${i}].cause: "${f.cause}" is not a key of its explain (${causes.map((k) => `"${k}"`).join(", ") || "it has none"})`);
    }
    if (!existsSync(join(PROJECT_ROOT, f.script))) throw new InputError(`framework file ${path}: findings[${i}].script: ${f.script} does not exist`);
  });
}

/** Every {"result": x} must name a value saved by an earlier step of the same path. */
function checkResults(path: string, c: Convention): void {
  for (const p of c.paths) {
    const saved = new Set<string>();
    const refs = (a: Arg, where: string) => {
      if (typeof a === "object" && a !== null && "result" in a && !saved.has(a.result)) {
        throw new InputError(`framework file ${path}: path "${p.name}", ${where}: {"result": "${a.result}"} is not saved by an earlier step (saveAs)`);
      }
    };
    p.steps.forEach((s, i) => {
      s.args.forEach((a, j) => refs(a, `step ${i} args[${j}]`));
      for (const [k, a] of Object.entries({ ...s.kwargs, ...s.ifNamed })) refs(a, `step ${i} ${k}`);
      if (s.saveAs) saved.add(s.saveAs);
    });
    if (p.norm !== "return" && !saved.has(p.norm.result)) throw new InputError(`framework file ${path}: path "${p.name}": norm {"result": "${p.norm.result}"} is never saved`);
  }
}

/** Every framework of adapters/torch/frameworks/, by name. */
export function loadFrameworks(dir = FRAMEWORKS_DIR): Map<string, Framework> {
  if (dir === FRAMEWORKS_DIR && cache) return cache;
  const out = new Map<string, Framework>();
  if (existsSync(dir)) {
    for (const f of readdirSync(dir).filter((x) => x.endsWith(".json")).sort()) {
      const path = join(dir, f);
      const fw = parseFrameworkFile(path, readFileSync(path, "utf8"));
      out.set(fw.name, fw);
    }
  }
  if (dir === FRAMEWORKS_DIR) cache = out;
  return out;
}

export function getFramework(name: string): Framework {
  const fw = loadFrameworks().get(name);
  if (!fw) {
    throw new InputError(
      `subject "torch:${name}": no framework "${name}" in adapters/torch/frameworks/ (known: ${[...loadFrameworks().keys()].join(", ")}); ` +
        "a Python function is torch:<module>:<function>",
    );
  }
  return fw;
}

/** For `clip-parity list subjects`: one line per declared framework. */
export function listFrameworkSubjects(): { spec: string; framework: string; description: string }[] {
  return [...loadFrameworks().values()].map((fw) => ({ spec: `torch:${fw.name}`, framework: fw.name, description: fw.description }));
}

/** The layout's axes of size > 1 that `axes` does not allow (none when `axes` is unset: anything goes). */
function axesBeyond(layout: Layout, axes: readonly LayoutAxis[] | undefined): LayoutAxis[] {
  return axes ? LAYOUT_AXES.filter((a) => layout[a] > 1 && !axes.includes(a)) : [];
}

function usesArg(c: Convention, source: string): boolean {
  return c.paths.some((p) => p.steps.some((s) => [...s.args, ...Object.values(s.kwargs), ...Object.values(s.ifNamed)].some((a) => a === source)));
}

/**
 * Null when the convention can run the cell; otherwise why not, in one line. The cell's own clip
 * parameters decide (a framework without a norm_type parameter clips by the 2-norm, one without
 * error_if_nonfinite never raises on request), and the mesh axes the convention's inputs can be built over.
 */
export function applicability(c: Convention, cell: { layout: Layout; normType: number; regime: string; errorIfNonfinite: boolean; dtype?: DType }): string | null {
  const beyond = axesBeyond(cell.layout, c.axes);
  if (beyond.length) return `its inputs are built over ${c.axes!.join(" x ")} only, and the layout has ${beyond.map((a) => `${a}(${cell.layout[a]})`).join(", ")}`;
  if (c.dtypes && cell.dtype && !c.dtypes.includes(cell.dtype)) return `its inputs are built in ${c.dtypes.join("/")} only, and the cell is ${cell.dtype}`;
  if (c.normTypes !== "any") {
    const ok = c.normTypes.some((n) => (n === "inf" ? cell.normType === Infinity : n === cell.normType));
    if (!ok) return `its clip takes no norm_type: it computes the ${c.normTypes.join("/")}-norm only, and the cell asks for ${cell.normType === Infinity ? "inf" : cell.normType}`;
  }
  if (cell.errorIfNonfinite && cell.regime.startsWith("nonfinite") && !usesArg(c, "error_if_nonfinite")) {
    return "its clip takes no error_if_nonfinite, and the cell asks for an error on a non-finite norm";
  }
  return null;
}

/**
 * Null when the cell is a configuration the framework's trainer builds and asks for; otherwise why it
 * is not, in one line (the framework's `configurations`).
 */
export function outsideConfigurations(fw: Framework, cell: Pick<Case, "layout" | "model" | "dtype" | "normType"> & { errorIfNonfinite: boolean; regime: string }): string | null {
  const c = fw.configurations;
  if (!c) return null;
  const beyond = axesBeyond(cell.layout, c.axes);
  if (beyond.length) return `${fw.name}'s trainer builds no ${beyond.map((a) => `${a} > 1`).join(", ")} (it uses ${c.axes!.length ? c.axes!.join(", ") : "one rank"} only)`;
  if (!c.mtpWithPp && cell.layout.pp > 1 && getModel(cell.model).ties.length > 0) return `${fw.name}'s trainer builds no MTP layer (a tied replica of the embedding) together with PP`;
  if (!c.emptyStages && cell.layout.pp > 1) {
    const model = getModel(cell.model);
    const held = new Set(model.params.map((p) => stageOfParam(p, model.nLayers, cell.layout.pp)));
    const empty = Array.from({ length: cell.layout.pp }, (_, s) => s).filter((s) => !held.has(s));
    if (empty.length) return `${fw.name}'s trainer builds no pipeline stage without parameters (here stage ${empty.join(", ")} of ${cell.layout.pp} holds none)`;
  }
  if (c.dtypes && !c.dtypes.includes(cell.dtype)) return `${fw.name}'s trainer gives its clip ${c.dtypes.join("/")} gradients, not ${cell.dtype}`;
  const asked = cell.normType === Infinity ? "inf" : cell.normType;
  if (c.normTypes && !c.normTypes.includes(asked)) return `${fw.name}'s trainer asks for the ${c.normTypes.join("/")}-norm only, not ${asked}`;
  const nonfinite = regimeSpec(cell.regime).special !== null; // the regime puts a NaN or an infinity in a gradient
  if (!c.errorIfNonfinite && cell.errorIfNonfinite && nonfinite) return `${fw.name}'s trainer never asks its clip to raise on a non-finite norm`;
  if (!c.nonfiniteNorms && nonfinite) return `${fw.name}'s trainer skips the step on a non-finite norm before it clips`;
  return null;
}

/** Null when the framework's clip can run on `backend`; otherwise why not (e.g. it needs CUDA). */
export function cannotRunOn(fw: Framework, backend: "cpu" | "cuda"): string | null {
  return fw.configurations?.needs === "cuda" && backend !== "cuda" ? `needs CUDA: ${fw.name}'s clip runs on CUDA devices only, and these cells run on CPU ranks` : null;
}

/**
 * `clip-parity export`: one cell of a torch: subject as a short standalone PyTorch script (torchrun, gloo or NCCL) that
 * depends on nothing of this project, to attach to an upstream issue. Its docstring says what was run and what went
 * wrong (framework, configuration, the cause in words, expected against got); its code is the cell as a handful of
 * constants and the model as compact rows (parameters repeated per layer written once), SPEC §5's generator as one
 * function, DTensors built by `distribute_tensor` from each parameter's full gradient, the call as the framework's
 * trainer makes it, and only the checks that clip-parity saw fail (all of them when none did).
 *
 * The script is adapters/torch/repro_template.py with the docstring (@@DOC@@), the cell (@@CELL@@) and the call
 * (@@CALL@@) filled in, the pattern of a collective's timeout (@@TIMEOUT_RE@@) and the generator (@@GENERATE@@: the
 * function adapters/torch/gen_core.py marks, copied verbatim, the one text of it that gen.py calls too); template
 * lines tagged `#? check ...` are kept only when the script makes one of those checks.
 */
import { escapeControls } from "../../util/controls.ts";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { InputError } from "../../errors.ts";
import { writeFileAtomic } from "../../util/fs.ts";
import { formatLayout, parseLayout, validateLayout, worldSize, type ValidLayout } from "../../layout/layout.ts";
import { getModel, MODEL_NAMES } from "../../model/models.ts";
import { placementsFor, planWorld, stageOfParam } from "../../model/plan.ts";
import { computeReference, type Reference } from "../../gradients/reference.ts";
import { lowPrecisionDtype, normTolerance } from "../../checks/types.ts";
import { CHECK_IDS } from "../../checks/index.ts";
import { ALL_REGIMES, maxNormOf, regimeSpec, type Regime, type RegimeSpec } from "../../gradients/regimes.ts";
import type { LogicalParam, ModelManifest } from "../../model/manifest.ts";
import { causeText, causesOf, COLLECTIVE_TIMEOUT_RE, messageHead } from "../causes.ts";
import type { FrameworksData } from "../frameworks-run.ts";
import { applicability, outsideConfigurations } from "./frameworks.ts";
import { meshesOf } from "../../world/context.ts";
import { neededGroups } from "../../checks/comm-budget.ts";
import { type DType, type ToleranceClass } from "../../subject/api.ts";
import { clipCoefficient } from "../../numerics/numerics.ts";
import { runCell } from "../../execute/cell.ts";
import { cellId, type Cell } from "../../cell/cell.ts";
import type { CellResult } from "../../results/types.ts";
import { ADAPTER_DIR, PROJECT_ROOT, type TorchOptions } from "./options.ts";
import type { Arg, ArgSource, Call, Convention } from "./protocol.ts";
import { closeTorchSessions, loadTorchSubject, refusePartial, torchTolerance, type TorchSubject } from "./subject.ts";

export const TEMPLATE = join(ADAPTER_DIR, "repro_template.py");
/** SPEC §5's generator in Python, one text: gen.py calls it, every exported script carries its marked lines verbatim. */
export const GENERATOR = join(ADAPTER_DIR, "gen_core.py");

/** The lines of GENERATOR between its marker comments: the function `generate` the script calls, standalone. */
export function generatorText(source = readFileSync(GENERATOR, "utf8")): string {
  const m = /^# clip-parity export: generate from here\n([^]*?)^# clip-parity export: generate to here$/m.exec(source);
  if (!m || !m[1]!.startsWith("def generate(")) throw new Error(`internal: ${GENERATOR} has no marked generate() between its two export markers`);
  return m[1]!.replace(/\n$/, "");
}

/** adapters/torch/support/: one Python module per framework, registered by name in its __init__.py REGISTRY. */
export const SUPPORT_DIR = join(ADAPTER_DIR, "support");

/** REGISTRY of SUPPORT_DIR/__init__.py: framework name -> module file name (without .py). */
export function supportRegistry(source = readFileSync(join(SUPPORT_DIR, "__init__.py"), "utf8")): Map<string, string> {
  const m = /^REGISTRY = \{\n([^]*?)^\}$/m.exec(source);
  if (!m) throw new Error(`internal: ${join(SUPPORT_DIR, "__init__.py")} has no REGISTRY = {...} block`);
  const out = new Map<string, string>();
  for (const line of m[1]!.split("\n")) {
    const e = /^\s*"([a-z][a-z0-9-]*)": "(\w+)",\s*$/.exec(line);
    if (e) out.set(e[1]!, e[2]!);
    else if (line.trim() && !line.trim().startsWith("#")) throw new Error(`internal: REGISTRY line ${JSON.stringify(line)} is not "framework": "module",`);
  }
  return out;
}

/**
 * The marked text of a framework's support module (between its `# ---- support: NAME` and `# ---- end support: NAME`
 * lines, both kept), copied verbatim into the exported script; null when the framework has no module.
 */
export function supportText(framework: string, registry = supportRegistry()): { module: string; text: string } | null {
  const module = registry.get(framework);
  if (!module) return null;
  const path = join(SUPPORT_DIR, `${module}.py`);
  const source = readFileSync(path, "utf8");
  const m = /^(# ---- support: ([\w-]+) [^\n]*\n[^]*?^# ---- end support: \2 -+)$/m.exec(source);
  if (!m) throw new Error(`internal: ${path} has no text between "# ---- support: NAME" and "# ---- end support: NAME" markers`);
  return { module, text: m[1]! };
}

/** The file name `clip-parity export` gives a cell's script. */
export function reproFileName(id: string): string {
  return `repro-${id.replace(/[^A-Za-z0-9_.-]+/g, "-").replace(/^-+|-+$/g, "")}.py`;
}

const DTYPES: readonly DType[] = ["f32", "bf16", "f16"];

/**
 * A cell id as `cellId` writes it: subject/layout/model/dtype/nP/regime/sS[/maxX][/err|noerr][/stepK].
 * The subject may itself hold slashes (a module path), so the fixed part is found from its shape.
 */
export function parseCellId(id: string): Cell {
  const parts = id.split("/");
  for (let i = 1; i + 5 < parts.length; i++) {
    const [layout, model, dtype, norm, regime, seed] = parts.slice(i, i + 6) as string[];
    if (!DTYPES.includes(dtype as DType) || !/^n(inf|[\d.e+-]+)$/.test(norm!) || !/^s\d+$/.test(seed!)) continue;
    if (!(MODEL_NAMES as readonly string[]).includes(model!)) throw new InputError(`--cell "${id}": model "${model}" is not one of ${MODEL_NAMES.join(", ")}`);
    if (!(ALL_REGIMES as readonly string[]).includes(regime!)) throw new InputError(`--cell "${id}": regime "${regime}" is not one of ${ALL_REGIMES.join(", ")}`);
    const normType = norm === "ninf" ? Infinity : Number(norm!.slice(1));
    if (!(normType > 0)) throw new InputError(`--cell "${id}": norm "${norm}" is not n2, n1, ninf or nP with P > 0`);
    const cell: Cell = {
      subject: parts.slice(0, i).join("/"),
      layout: parseLayout(layout!),
      model: model!,
      dtype: dtype as DType,
      normType,
      regime: regime as Regime,
      seed: Number(seed!.slice(1)),
    };
    for (const extra of parts.slice(i + 6)) {
      if (/^max[\d.e+-]+$/.test(extra) && Number(extra.slice(3)) > 0) cell.maxNorm = Number(extra.slice(3));
      else if (extra === "err" || extra === "noerr") cell.errorIfNonfinite = extra === "err";
      else if (/^step\d+$/.test(extra)) cell.step = Number(extra.slice(4));
      else throw new InputError(`--cell "${id}": "${extra}" is not maxX, err, noerr or stepK`);
    }
    return cell;
  }
  throw new InputError(
    `--cell "${id}" is not a cell id (subject/layout/model/dtype/nP/regime/sS, as \`clip-parity run\` prints them, e.g. ` +
      "torch:torchtitan/pp2,dp_shard2,ep2/deepseek-v3-debug/f32/n2/active/s0)",
  );
}

// ---- the call, as Python ------------------------------------------------------------------------------

/** A JSON value as a Python literal. */
function py(v: unknown): string {
  if (v === null || v === undefined) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (typeof v === "number") return Number.isFinite(v) ? String(v) : Number.isNaN(v) ? 'float("nan")' : v > 0 ? "math.inf" : "-math.inf";
  return JSON.stringify(v);
}

interface Gen {
  imports: Map<string, string>;
  names: Set<string>;
  instances: Map<string, string>;
  lines: string[];
  foreach: boolean | null;
  expertsPresent: boolean;
  /** The argument sources the rendered calls use: what decides the helpers the script defines. */
  used: Set<ArgSource>;
}

/** The Python name a target is called by, importing it once (aliased when two share a name). */
function importName(g: Gen, target: string): string {
  const hit = g.imports.get(target);
  if (hit) return hit;
  const [module, qual] = target.split(":") as [string, string];
  const head = qual.split(".")[0]!;
  let alias = head;
  for (let k = 2; g.names.has(alias); k++) alias = `${head}_${k}`;
  g.names.add(alias);
  g.lines.push(alias === head ? `from ${module} import ${head}` : `from ${module} import ${head} as ${alias}`);
  const name = [alias, ...qual.split(".").slice(1)].join(".");
  g.imports.set(target, name);
  return name;
}

/** An argument source as a Python expression, or null when it is left out (foreach unset). */
function argExpr(g: Gen, a: Arg): string | null {
  if (typeof a === "object") return "const" in a ? py(a.const) : a.result;
  g.used.add(a);
  switch (a) {
    case "params":
      return "P";
    case "model":
      return "ParamsModel(named)";
    case "grads":
      return "[q.grad for q in P if q.grad is not None]";
    case "local_params":
      return "LP";
    case "grads_for_norm":
      return "[q.grad for q in LP if q.grad is not None and q.counted_in_norm]";
    case "local_grads": // the very local tensors of the DTensor gradients: scaling them in place scales those
      return "[local(q.grad) for q in P if q.grad is not None]";
    case "mpu":
      return "mpu()";
    case "grads_for_norm_deepspeed": {
      const isMp = importName(g, "deepspeed.runtime.utils:is_model_parallel_parameter");
      const tpRank = importName(g, "deepspeed.utils.bwc:bwc_tensor_model_parallel_rank");
      return `[local(q.grad) for q in P if q.grad is not None and not q.ds_pipe_replicated and (${tpRank}(mpu()) == 0 or ${isMp}(q))]`;
    }
    case "fsdp1_module":
      return "fsdp1_root(named, meshes).root";  // the support module's Fsdp1Root; its write-back after the call: renderCallParts
    case "zero_optimizer":
      return "zero_root(named)";
    case "zero_grad_partitions":
      return "zero_root.partitions";  // the write-back after the call: renderCallParts
    case "torchrec_optimizer": // the support module's build_optimizer (copied into the script), over the parameters
      return "build_optimizer(named, MAX_NORM, NORM_TYPE)";
    case "deepspeed_engine": // the support module's Bf16Engine (copied into the script), built once: both steps use it
      return "bf16_engine(named)";
    case "max_norm":
      return "MAX_NORM";
    case "norm_type":
      return "NORM_TYPE";
    case "error_if_nonfinite":
      return "ERROR_IF_NONFINITE";
    case "foreach":
      return g.foreach === null ? null : py(g.foreach);
    case "pp_mesh":
      return 'meshes["pp"] if LAYOUT["pp"] > 1 else None';
    case "world_group":
      return "dist.group.WORLD";
    case "ep_enabled":
      return 'LAYOUT["ep"] > 1';
    case "experts_present":
      return py(g.expertsPresent);
    case "dist_backend":
      return "dist.get_backend()";
  }
}

/** A step's call: lines to run before it (a signature check) and the call expression. */
function callExpr(g: Gen, step: Call): { before: string[]; expr: string } {
  let fn: string;
  const pre: string[] = [];
  if (step.receiver === "none") fn = importName(g, step.target);
  else if (step.receiver === "unused") {
    fn = importName(g, step.target);
    pre.push("None"); // an unbound method that never reads self
  } else if ("arg" in step.receiver) {
    fn = `${argExpr(g, step.receiver.arg)}.${step.target.split(".").pop()}`;
  } else {
    const key = JSON.stringify(step.receiver);
    let inst = g.instances.get(key);
    if (!inst) {
      inst = `receiver_${g.instances.size + 1}`;
      g.instances.set(key, inst);
      const factory = importName(g, step.receiver.factory);
      const kw = Object.entries(step.receiver.kwargs).map(([k, a]) => `${k}=${argExpr(g, a)}`);
      // Built on first use (after init_process_group), then the same object: one per process, as the trainer holds it.
      g.lines.push(`${inst} = functools.cache(lambda: ${factory}(${kw.join(", ")}))  # built once per process, as the trainer holds it`);
    }
    fn = `${inst}().${step.target.split(".").pop()}`;
  }
  const args = [...pre, ...step.args.map((a) => argExpr(g, a) ?? "None")];
  const kwargs = Object.entries(step.kwargs).flatMap(([k, a]) => {
    const e = argExpr(g, a);
    return e === null ? [] : [`${k}=${e}`];
  });
  const named = Object.entries(step.ifNamed).flatMap(([k, a]) => {
    const e = argExpr(g, a);
    return e === null ? [] : [[k, e] as const];
  });
  if (!named.length) return { before: [], expr: `${fn}(${[...args, ...kwargs].join(", ")})` };
  // The plain torch:<module>:<function> convention: these only when the signature names them.
  const before = [`sig = inspect.signature(${fn}).parameters`, `kw = {${kwargs.map((k) => k.replace(/^(\w+)=/, '"$1": ')).join(", ")}}`];
  for (const [k, e] of named) before.push(`if "${k}" in sig:`, `    kw["${k}"] = ${e}`);
  return { before, expr: `${fn}(${[...args, "**kw"].join(", ")})` };
}

/** readsGrads: the script reads the clipped gradients (parity.tensors, scaling.nonempty); default true. */
type RenderOptions = { foreach: boolean | null; expertsPresent: boolean; taken?: string[]; readsGrads?: boolean };

/** `def clip(named, meshes)`: the convention's setup, path choice and steps as plain Python, with the helpers it uses. */
export function renderCall(c: Convention, opts: RenderOptions): string {
  return renderCallParts(c, opts).code;
}

/** renderCall's code, and the argument sources it uses (what the rest of the script must define for them). */
function renderCallParts(c: Convention, opts: RenderOptions): { code: string; used: ReadonlySet<ArgSource> } {
  const g: Gen = { imports: new Map(), names: new Set(["P", "LP", "named", "meshes", "kw", "sig", "ret"]), instances: new Map(), lines: [], foreach: opts.foreach, expertsPresent: opts.expertsPresent, used: new Set() };
  const body: string[] = [];
  const ind = "    ";
  body.push(`${ind}P = [p for _, p in named]`);
  const lpAt = body.length; // LP is built here when a rendered call uses the local parameters
  for (const s of c.setup) {
    if (s.why) body.push(`${ind}# ${s.why}`);
    const { before, expr } = callExpr(g, s);
    body.push(...before.map((l) => ind + l), `${ind}${expr}`);
  }
  const step = (s: Call, pad: string, last: boolean, norm: Convention["paths"][number]["norm"]) => {
    const out: string[] = [];
    if (s.why) out.push(`${pad}# ${s.why}`);
    const { before, expr } = callExpr(g, s);
    const lhs = s.saveAs ?? "ret";
    // FSDP1 and ZeRO clip their own flat gradients: the checks read the parameters', so they are copied back first.
    const readsGrads = last && opts.readsGrads !== false;
    const after = [
      ...(readsGrads && g.used.has("fsdp1_module") ? [`${pad}fsdp1_write_back(named)`] : []),
      ...(readsGrads && g.used.has("zero_optimizer") ? [`${pad}zero_write_back(named)`] : []),
    ];
    // The last step's value returned directly when it is the norm.
    if (last && norm === "return" && !s.saveAs && !after.length) out.push(...before.map((l) => pad + l), `${pad}return ${expr}`);
    else {
      out.push(...before.map((l) => pad + l), `${pad}${lhs} = ${expr}`, ...after);
      if (last) out.push(`${pad}return ${norm === "return" ? lhs : norm.result}`);
    }
    return out;
  };
  // A cell whose every rank took one path (a frameworks run saw it): that path alone, said so.
  const only = opts.taken?.length === 1 && c.paths.length > 1 ? c.paths.filter((p) => p.name === opts.taken![0]) : [];
  if (only.length) body.push(`${ind}# path "${only[0]!.name}", the one every rank takes in this cell (${c.paths.filter((p) => p !== only[0]).map((p) => `"${p.name}"`).join(", ")} left out)`);
  (only.length ? only : c.paths).forEach((p, i) => {
    const single = only.length > 0 || (c.paths.length === 1 && p.when === "always");
    let pad = ind;
    if (!single) {
      if (p.when === "always") body.push(i === 0 ? `${ind}if True:  # path "${p.name}"` : `${ind}else:  # path "${p.name}"`);
      else {
        const pred = importName(g, p.when.predicate);
        body.push(`${ind}# ${p.when.why}`);
        body.push(`${ind}${i === 0 ? "if" : "elif"} ${pred}(q.grad for q in P if q.grad is not None):  # path "${p.name}"`);
      }
      pad = ind + ind;
    }
    p.steps.forEach((s, k) => body.push(...step(s, pad, k === p.steps.length - 1, p.norm)));
  });
  // The helpers are those of the argument sources the rendered calls use (a path left out uses none).
  const usesLocal = g.used.has("local_params") || g.used.has("grads_for_norm");
  const usesMpu = g.used.has("mpu") || g.used.has("grads_for_norm_deepspeed") || g.used.has("zero_optimizer");
  if (usesLocal) body.splice(lpAt, 0, `${ind}LP = [local_param(p) for p in P]`);
  const helpers: string[] = [];
  if (g.used.has("model")) helpers.push(...PARAMS_MODEL);
  if (usesLocal) helpers.push(...localParamHelper(g.used.has("grads_for_norm")));
  if (usesMpu) helpers.push(...MPU);
  if (g.used.has("fsdp1_module")) helpers.push(...FSDP1_ROOT, ...(opts.readsGrads !== false ? FSDP1_WRITE_BACK : []));
  if (g.used.has("zero_optimizer")) helpers.push(...ZERO_ROOT, ...(opts.readsGrads !== false ? ZERO_WRITE_BACK : []));
  if (g.used.has("deepspeed_engine")) helpers.push(...BF16_ENGINE);
  const inspect = [
    ...(body.some((l) => l.includes("inspect.signature")) ? ["import inspect"] : []),
    ...(g.instances.size || usesMpu ? ["import functools"] : []),
    ...(usesMpu ? ["import types"] : []),
  ];
  // One `from module import a, b` per module, then the receivers that use them.
  const imported = new Map<string, string[]>();
  for (const l of g.lines) {
    const m = /^from (\S+) import (.+)$/.exec(l);
    if (m) imported.set(m[1]!, [...(imported.get(m[1]!) ?? []), m[2]!]);
  }
  const imports = [...imported].map(([module, names]) => `from ${module} import ${names.join(", ")}`);
  const receivers = g.lines.filter((l) => !l.startsWith("from "));
  const code = [...inspect, ...imports, ...receivers, ...helpers, "", "def clip(named, meshes):  # the call under test, made the way the framework's trainer makes it", ...body]
    .join("\n")
    .replace(/\n{3,}/g, "\n\n")
    .replace(/^\n+/, "");
  return { code, used: g.used };
}

/**
 * What a trainer passes as `model` (only when the convention passes one); nn.Module.parameters() goes through
 * named_parameters(), so overriding that one is enough.
 */
const PARAMS_MODEL = [
  "",
  "class ParamsModel(torch.nn.Module):  # what the trainer passes as `model`: this rank's copies, by their names",
  "    def __init__(self, named):",
  "        super().__init__()",
  "        self.named = named",
  '    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):',
  "        return iter([(prefix + n, p) for n, p in self.named])",
];

/** The groups of the adapter's Mpu that DeepSpeed's norm reads (only when the convention passes an mpu). */
const MPU = [
  "",
  "@functools.cache",
  "def mpu():  # a Megatron-style mpu (Megatron-DeepSpeed passes one): model parallel = pp x tp, data = dp_replicate x dp_shard x cp",
  '    g = torch.arange(WORLD).reshape(LAYOUT["pp"], -1, LAYOUT["tp"])  # (pp, data, tp), row-major',
  '    rows = {"model": g.permute(1, 0, 2).reshape(g.shape[1], -1), "tensor_model": g.reshape(-1, LAYOUT["tp"]), "pipeline_model": g.permute(1, 2, 0).reshape(-1, LAYOUT["pp"]), "data": g.permute(0, 2, 1).reshape(-1, g.shape[1])}',
  "    groups = {kind: dist.new_subgroups_by_enumeration(r.tolist(), TIMEOUT)[0] for kind, r in rows.items()}",
  '    return types.SimpleNamespace(**{f"get_{kind}_parallel_{what}": functools.partial(f, grp) for kind, grp in groups.items() for what, f in (("group", lambda x: x), ("rank", dist.get_rank), ("world_size", dist.get_world_size))})',
];

/**
 * FSDP1 as backward leaves it (only when the convention clips through one; ARG_SOURCES.fsdp1_module): the support
 * module's Fsdp1Root (copied into the script), over what it reads of a cell, which ScriptCell gives from the script's
 * parameters.
 */
const FSDP1_ROOT = [
  "",
  "class ScriptCell:  # what a support module's root reads of a cell, from this script's parameters",
  "    def __init__(self, named, meshes):",
  "        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset as block",
  '        self.job, self.meshes, self.params, self.param_by_fqn = {"layout": LAYOUT, "maxNorm": MAX_NORM}, meshes, named, dict(named)',
  "        self.dtype, self.device = TORCH_DTYPE[DTYPE], named[0][1].device",
  '        self.by_fqn = {f: {"block": dict(zip(("len", "start"), block(p.shape, p.device_mesh, p.placements) if isinstance(p, DTensor) else (p.shape, [0] * p.dim())))} for f, p in named}',
  "    def local_grad(self, fqn):",
  "        return local(self.param_by_fqn[fqn].grad)",
  "",
  "@torch.utils._python_dispatch._disable_current_modes()  # building what backward leaves is not the clip's communication",
  "def fsdp1_root(named, meshes):",
  '    if not hasattr(fsdp1_root, "it"):',
  "        fsdp1_root.it = Fsdp1Root(ScriptCell(named, meshes))",
  "    return fsdp1_root.it",
];

/** The clipped flat gradients back into the parameters' own shards, which the checks read. */
const FSDP1_WRITE_BACK = [
  "",
  "@torch.utils._python_dispatch._disable_current_modes()  # copying back is not the clip's communication",
  "def fsdp1_write_back(named):",
  "    fsdp1_root.it.write_back()",
];

/** DeepSpeed's bf16 engine one step and a backward in (ARG_SOURCES.deepspeed_engine): the support module's Bf16Engine, once. */
const BF16_ENGINE = [
  "",
  "@torch.utils._python_dispatch._disable_current_modes()  # building the engine, its first step and the backward are not the clip's communication",
  "def bf16_engine(named):  # the engine once: every step of the call uses the same one",
  '    if not hasattr(bf16_engine, "it"):',
  "        bf16_engine.it = Bf16Engine(bf16_engine_grads(named), MAX_NORM)",
  "    return bf16_engine.it.engine",
];

/** DeepSpeed's ZeRO-2 optimizer as backward leaves it (only when the convention clips through one; ARG_SOURCES.zero_optimizer). */
const ZERO_ROOT = [
  "",
  "def tp_split(p):  # a Megatron-DeepSpeed model's parameter: whole over the data-parallel axes, split over tp",
  '    return [q if n == "tp" and isinstance(q, Shard) else Replicate() for n, q in zip(p.device_mesh.mesh_dim_names, p.placements)] if isinstance(p, DTensor) else None',
  "",
  "@torch.utils._python_dispatch._disable_current_modes()  # building the engine and what backward leaves is not the clip's communication",
  "def zero_root(named):  # a ZeRO-2 engine over the parameters; its averaged_gradients this rank's partition of the reduced gradients",
  '    if hasattr(zero_root, "opt"):',
  "        return zero_root.opt",
  "    import deepspeed",
  "    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset as local_shape",
  "    module = torch.nn.Module()",
  "    for i, (_, p) in enumerate(named):",
  "        mp = torch.nn.Parameter(torch.empty(local_shape(p.shape, p.device_mesh, tp_split(p))[0] if tp_split(p) else p.shape, dtype=p.dtype, device=p.device))",
  '        mp.tensor_model_parallel = any(isinstance(q, Shard) for q in tp_split(p) or []) and LAYOUT["tp"] > 1',
  "        mp.grad = None if p.grad is None else p.grad.redistribute(p.device_mesh, tp_split(p)).to_local() if tp_split(p) else p.grad.clone()  # reduced, as every rank holds it",
  '        module.register_parameter(f"p{i}", mp)',
  '    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_clipping": MAX_NORM, "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True,',
  '           **{"f32": {}, "bf16": {"bf16": {"enabled": True}}, "f16": {"fp16": {"enabled": True, "loss_scale": 1.0}}}[DTYPE]}',
  '    _, opt, _, _ = deepspeed.initialize(model=module, optimizer=torch.optim.SGD(module.parameters(), lr=0.0), config=cfg, mpu=mpu(), dist_init_required=False)',
  "    if opt.use_grad_accum_attribute:",
  "        for mp in module.parameters():",
  "            mp.grad_accum, mp.grad = mp.grad, None",
  "    opt.all_grad_tensors[0] = opt.get_all_grad_tensors(opt.params_in_partition[0], dtype=opt.gradient_accumulation_dtype)",
  "    ag = opt.averaged_gradients[0] = opt.get_flat_partition(opt.params_in_partition[0], opt.first_offset[0], opt.partition_size[0], opt.gradient_accumulation_dtype, named[0][1].device, 0, return_tensor_list=True)",
  "    last = dist.get_rank(opt.dp_process_group) == dist.get_world_size(opt.dp_process_group) - 1  # step(): the last partition is padded",
  "    zero_root.partitions, zero_root.module = [(opt.flatten_dense_tensors_aligned(ag, int(opt.partition_size[0])) if last else opt.flatten(ag)).float()], module",
  "    zero_root.opt = opt",
  "    return opt",
];

/** The clipped ZeRO partitions back into the parameters' own shards, which the checks read. */
const ZERO_WRITE_BACK = [
  "",
  "@torch.utils._python_dispatch._disable_current_modes()  # copying back is not the clip's communication",
  "def zero_write_back(named):  # the clipped partitions, gathered over the data-parallel ranks, back into the parameters' own shards",
  "    opt = zero_root.opt",
  "    parts = [torch.empty_like(zero_root.partitions[0]) for _ in range(dist.get_world_size(opt.dp_process_group))]",
  "    dist.all_gather(parts, zero_root.partitions[0], group=opt.dp_process_group)",
  "    g = torch.cat(parts)",
  "    for (_, p), mp, at in zip(named, zero_root.module.parameters(), opt.round_robin_bit16_offsets[0]):",
  "        if p.grad is not None and not tp_split(p):  # one rank: plain tensors",
  "            p.grad.copy_(g[at:at + mp.numel()].view(mp.shape))",
  "        elif p.grad is not None:",
  "            d = DTensor.from_local(g[at:at + mp.numel()].view(mp.shape), p.device_mesh, tp_split(p), run_check=False, shape=p.shape, stride=p.stride())",
  "            p.grad.to_local().copy_(d.redistribute(p.device_mesh, p.grad.placements).to_local())",
];

/**
 * Plain tensors over the local shards, for frameworks that never see a DTensor (only when the convention asks),
 * with the one attribute Megatron's selection (grads_for_norm) reads.
 */
function localParamHelper(counted: boolean): string[] {
  const grad = "None if p.grad is None else local(p.grad)";
  return [
    "",
    "def local_param(p):  # a plain parameter over p's local shard; its .grad is the very local tensor of p's gradient",
    "    lp = torch.nn.Parameter(torch.empty(local(p).shape, dtype=p.dtype, device=p.device))",
    counted ? `    lp.grad, lp.counted_in_norm = ${grad}, p.counted_in_norm` : `    lp.grad = ${grad}`,
    "    return lp",
  ];
}

// ---- the cell -------------------------------------------------------------------------------------------

export interface ExportData {
  cell: Cell;
  script: string;
  fileName: string;
  /** The script keeps a few parameters with random gradients: the failure is the layout's alone (LAYOUT_ONLY_CHECKS). */
  minimised: boolean;
}

/** What clip-parity saw on the cell: a run, or the committed docs/frameworks.json record of the framework's run. */
interface Seen {
  source: string;
  failed: string[];
  /** First line of each failing check's message. */
  messages: Record<string, string>;
  causes: string[];
  repro: string | null;
  /** The convention paths the ranks took (a frameworks run records them), if known. */
  paths?: string[];
}

function seenFromRun(r: CellResult): Seen {
  const failed = r.checks.filter((c) => c.status === "fail");
  return { source: "clip-parity's run of this cell", failed: failed.map((c) => c.id), messages: Object.fromEntries(failed.map((c) => [c.id, messageHead(c.message)])), causes: causesOf(r), repro: r.repro };
}

/**
 * The record of this cell in a frameworks run (`records`, or the committed docs/frameworks.json of
 * `npm run frameworks`), if the framework's run has one.
 */
function seenFromRecord(cell: Cell, subject: TorchSubject, records?: FrameworksData): Seen | null {
  const path = join(PROJECT_ROOT, "docs", "frameworks.json");
  if (!subject.framework || (!records && !existsSync(path))) return null;
  const data = records ?? (JSON.parse(readFileSync(path, "utf8")) as FrameworksData);
  const fw = data.frameworks.find((f) => f.name === subject.framework!.name);
  const rec = fw?.cells.find((c) => c.case === cellId(cell).slice(cell.subject.length + 1));
  if (!fw || !rec || rec.status === "n/a") return null;
  return { source: `docs/frameworks.json, ${fw.name} ${fw.version}`, failed: rec.failed, messages: rec.messages, causes: rec.causes, repro: null, paths: rec.paths };
}

/** The checks an exported script implements (repro_template.py); it makes those clip-parity saw fail, in clip-parity's order (ALL_CHECKS). */
export const SCRIPT_CHECKS: ReadonlySet<string> = new Set(["parity.norm", "parity.tensors", "parity.ranks", "scaling.nonempty", "liveness", "errors.nonfinite", "errors.raised", "comm.budget"]);
const ALL_CHECKS = CHECK_IDS.filter((c) => SCRIPT_CHECKS.has(c));
/**
 * The failures the layout alone makes, whatever the gradients hold: a raise (of input refused, of a rank with nothing
 * to count), a hang, collectives beyond the budget. A script for these is minimised (`minimalParams`).
 */
export const LAYOUT_ONLY_CHECKS: ReadonlySet<string> = new Set(["errors.raised", "liveness", "comm.budget"]);

/**
 * The parameters a minimised script keeps: the first of each class of (pipeline stage, tied or not, and for one with
 * a gradient its mesh and placements over the axes of size > 1). A layout-only failure depends on which meshes and
 * placements a rank's gradients span, and a class spans the same ones; a tied parameter keeps its replica.
 */
export function minimalParams(model: ModelManifest, layout: ValidLayout, hasGrad: (index: number) => boolean): LogicalParam[] {
  const tied = new Set(model.ties.map((t) => t.canonical));
  const classes = new Set<string>();
  return model.params.filter((p) => {
    const { mesh, meshAxes, placements } = placementsFor(p, layout);
    const split = meshAxes.flatMap((a, k) => ((layout as Record<string, number>)[a] ?? 2) > 1 ? [`${a}:${JSON.stringify(placements[k])}`] : []);
    const key = JSON.stringify([stageOfParam(p, model.nLayers, layout.pp), tied.has(p.name), hasGrad(p.index) && [mesh, split]]);
    return !classes.has(key) && !!classes.add(key);
  });
}
if (ALL_CHECKS.length !== SCRIPT_CHECKS.size) throw new Error(`internal: the export implements checks the harness does not have: ${[...SCRIPT_CHECKS].filter((c) => !CHECK_IDS.includes(c)).join(", ")}`);

/** A Python literal of a float: repr-exact for finite values. */
function pyFloat(x: number): string {
  if (Number.isNaN(x)) return 'float("nan")';
  if (!Number.isFinite(x)) return x > 0 ? "math.inf" : "-math.inf";
  const s = String(x);
  return /[.e]/.test(s) ? s : `${s}.0`;
}

/**
 * The model as Python for the script: MODEL = [(where, name prefix, rows)] in manifest order, where "first" (stage 0),
 * "last" (the last stage) or a range of layers whose parameters repeat under the prefix "layers.{i}."; rows are
 * "name shape tp-style" triples, a shape as d0,d1. A run of parameters outside the layers that repeats a layer's rows
 * under another prefix (DeepSeek-V3's MTP block) is written as that prefix over the same rows; rows used twice are
 * named once. The script's expansion is replayed here and checked against the manifest.
 */
function modelCode(model: ModelManifest): string[] {
  const triple = (name: string, p: { shape: number[]; tp: string }) => `${name} ${p.shape.join(",")} ${p.tp}`;
  type Group = { where: string; first: number; last: number; prefix: string; rows: string[] };
  const groups: Group[] = [];
  for (const p of model.params) {
    const where = p.layer === null ? (p.kind === "embedding" ? "first" : "last") : "layer";
    const prefix = p.layer === null ? "" : `layers.${p.layer}.`;
    if (!p.name.startsWith(prefix)) throw new Error(`internal: ${p.name} (layer ${p.layer}) does not start with ${prefix}`);
    const g = groups[groups.length - 1];
    const layer = p.layer ?? -1;
    if (g && g.where === where && g.last === layer) g.rows.push(triple(p.name.slice(prefix.length), p));
    else groups.push({ where, first: layer, last: layer, prefix: prefix && "layers.{i}.", rows: [triple(p.name.slice(prefix.length), p)] });
  }
  // Consecutive layers with the same rows: one range.
  const merged: Group[] = [];
  for (const g of groups) {
    const m = merged[merged.length - 1];
    if (m && g.where === "layer" && m.where === "layer" && m.last === g.first - 1 && m.rows.join() === g.rows.join()) m.last = g.last;
    else merged.push({ ...g, rows: [...g.rows] });
  }
  // Outside the layers: a run of rows that is a layer's rows under a prefix of its own.
  const layerRows = merged.filter((g) => g.where === "layer").map((g) => g.rows);
  const out: Group[] = [];
  for (const g of merged) {
    if (g.where === "layer") {
      out.push(g);
      continue;
    }
    let rest = g.rows;
    for (let j = 0; j < rest.length; j++) {
      const hit = layerRows.find((r) => {
        const first = r[0]!.split(" ")[0]!;
        const name = rest[j]!.split(" ")[0]!;
        if (!name.endsWith(first) || j + r.length > rest.length) return false;
        const pre = name.slice(0, name.length - first.length);
        return r.every((row, k) => rest[j + k] === pre + row);
      });
      if (!hit) continue;
      const name = rest[j]!.split(" ")[0]!;
      if (j) out.push({ ...g, prefix: "", rows: rest.slice(0, j) });
      out.push({ ...g, prefix: name.slice(0, name.length - hit[0]!.split(" ")[0]!.length), rows: hit });
      rest = rest.slice(j + hit.length);
      j = -1;
    }
    if (rest.length) out.push({ ...g, prefix: "", rows: rest });
  }
  // Replay the script's expansion: the same names, shapes and styles in the same order as the manifest.
  const expanded = out.flatMap((g) => (g.where === "layer" ? Array.from({ length: g.last - g.first + 1 }, (_, k) => g.first + k) : [null]).flatMap((i) => g.rows.map((r) => g.prefix.replace("{i}", String(i)) + r)));
  const want = model.params.map((p) => triple(p.name, p));
  if (expanded.join("\n") !== want.join("\n")) throw new Error(`internal: the script's rows of ${model.name} do not expand to its manifest`);
  const text = (rows: string[]) => {
    const lines: string[] = [];
    for (const r of rows) {
      const last = lines[lines.length - 1];
      if (last !== undefined && last.length + 2 + r.length <= 150) lines[lines.length - 1] = `${last}  ${r}`;
      else lines.push(r);
    }
    // Continuation lines under the first (which follows the opening quotes): whitespace only separates the words.
    return lines.length === 1 ? JSON.stringify(lines[0]) : `"""${lines.join("\n    ")}"""`;
  };
  // Rows used twice get a name; so does the longest run of rows (3 or more) that two different lists start with
  // (DeepSeek-V3's attention, in its dense layer 0 and its MoE layers), the lists then written as that name + the rest.
  const lists = [...new Map(out.map((g) => [g.rows.join("\n"), g.rows])).values()];
  let shared: string[] = [];
  for (const a of lists) {
    for (const b of lists) {
      let k = 0;
      while (a !== b && k < a.length && k < b.length && a[k] === b[k]) k++;
      if (k >= 3 && k > shared.length) shared = a.slice(0, k);
    }
  }
  const defs: string[] = [];
  const names = new Map<string, string>();
  const define = (rows: string[], body: string) => {
    const name = `ROWS_${names.size + 1}`;
    names.set(rows.join("\n"), name);
    defs.push(`${name} = ${body}`);
  };
  if (shared.length) define(shared, text(shared));
  const body = (rows: string[]) => {
    const known = names.get(rows.join("\n"));
    if (known) return known;
    const k = shared.length && rows.length > shared.length && shared.every((r, i) => rows[i] === r) ? shared.length : 0;
    return k ? `${names.get(shared.join("\n"))} + " " + ${text(rows.slice(k))}` : text(rows);
  };
  for (const rows of lists) if (out.filter((g) => g.rows.join("\n") === rows.join("\n")).length > 1 && !names.has(rows.join("\n"))) define(rows, body(rows));
  const items = out.map((g) => {
    const where = g.where === "layer" ? `range(${g.first}, ${g.last + 1})` : JSON.stringify(g.where);
    return `(${where}, ${JSON.stringify(g.prefix)}, ${body(g.rows)})`;
  });
  const what = `# ${model.name} in order: (the "first" or "last" stage or a range of layers i, name prefix, "name shape tp-style" rows)`;
  const model_ = [`MODEL = [  ${what}`, ...items.map((x) => `    ${x.replace(/\n/g, "\n    ")},`), "]"];
  return [...defs, ...model_];
}

/** What the script is built from, worked out once so that its docstring, constants and checks state the same cell. */
interface CellFacts {
  id: string;
  layout: ValidLayout;
  world: number;
  model: ModelManifest;
  regime: RegimeSpec;
  step: number;
  reference: Reference;
  maxNorm: number;
  errorIfNonfinite: boolean;
  /** comm.budget's budget per rank, and the words the script gives for it. */
  commBudgets: number[];
  commWhy: string;
  expertsPresent: boolean;
  seen: Seen | null;
  /** Why the framework cannot be asked this cell (null: it can). */
  unsupported: string | null;
  /** Why the cell lies outside the configurations the framework's trainer builds (null: inside, or no framework). */
  outside: string | null;
  /** The script keeps a few parameters with random gradients (ExportData.minimised). */
  minimal: boolean;
}

/**
 * The cell as the script sees it, refused (InputError) where a script could not state it truthfully. `seen` is
 * clip-parity's run of the cell, if it ran; otherwise the committed docs/frameworks.json record when it has the cell.
 */
function cellFacts(cell: Cell, subject: TorchSubject, run: CellResult | null, records: FrameworksData | undefined, full: boolean): CellFacts {
  const layout = validateLayout(cell.layout);
  const world = worldSize(layout);
  const model = getModel(cell.model);
  const regime = regimeSpec(cell.regime);
  const step = cell.step ?? 0;
  const id = cellId(cell);
  const reference = computeReference(model, cell.dtype, cell.normType, cell.regime, cell.seed, step);
  const maxNorm = maxNormOf(cell, reference.totalNorm);
  const errorIfNonfinite = cell.errorIfNonfinite ?? regime.errorIfNonfinite;
  const plan = planWorld(model, layout);
  refuseUnscriptable(id, model, plan, regime);
  const { commBudgets, commWhy } = commBudgetsOf(layout, plan);
  const expertsPresent = plan.some((ps) => ps.some((p) => p.mesh === "sparse"));
  const seen = run ? seenFromRun(run) : seenFromRecord(cell, subject, records);
  const unsupported = applicability(subject.convention, { layout, normType: cell.normType, regime: cell.regime, errorIfNonfinite, dtype: cell.dtype });
  // a configuration the framework's trainer never builds: a failure there is not one its maintainers would take
  const outside = subject.framework ? outsideConfigurations(subject.framework, { ...cell, errorIfNonfinite }) : null;
  // Minimised (unless --full): a failure of the layout alone, in a regime of finite gradients, on a configuration
  // the framework supports: a few parameters with random gradients, no generator, no norm to compare.
  const minimal = !full && !!seen?.failed.length && seen.failed.every((c) => LAYOUT_ONLY_CHECKS.has(c)) && regime.special === null && !unsupported;
  return { id, layout, world, model, regime, step, reference, maxNorm, errorIfNonfinite, commBudgets, commWhy, expertsPresent, seen, unsupported, outside, minimal };
}

type WorldPlan = ReturnType<typeof planWorld>;

/** Refuses the cells a script would state wrongly: Partial gradients, tied copies with partial gradients of their own, replicas placed unlike their canonical copy. */
function refuseUnscriptable(id: string, model: ModelManifest, plan: WorldPlan, regime: RegimeSpec): void {
  refusePartial(plan.flat(), `export --cell ${id}`);
  if (regime.tiedExp !== undefined && plan.flat().some((p) => !p.canonical)) {
    throw new InputError(`export --cell ${id}: the finalize regime (each tied copy its own partial gradient) is not exported; the script gives every copy the logical gradient`);
  }
  for (const t of model.ties) {
    const p = model.params.find((x) => x.name === t.canonical)!;
    for (const r of t.replicas) if (r.tp !== p.tp) throw new Error(`internal: ${r.fqn} has tp style ${r.tp}, its canonical copy ${p.tp}: the script gives a replica its canonical copy's`);
  }
}

/** comm.budget's budget per rank, so that the script holds the framework to the same number clip-parity does. */
function commBudgetsOf(layout: ValidLayout, plan: WorldPlan): { commBudgets: number[]; commWhy: string } {
  const meshes = meshesOf(layout);
  // comm.budget's budget for a clip-shaped subject (no tie term) with no Partial gradient (refused above): the
  // check's own groups, + 1 for the PP reduction only where there is a pipeline
  const pp = layout.pp > 1 ? 1 : 0;
  const commBudgets = plan.map((params, rank) => neededGroups(meshes, rank, params).size + pp);
  return { commBudgets, commWhy: `distinct reduction groups${pp ? " + 1 (the PP reduction)" : ""}` };
}

/**
 * The checks the script makes (those it implements, in clip-parity's order): what clip-parity saw fail, else all,
 * less those that cannot fail on this cell, so that a script never reports a check it could not have made.
 */
function scriptChecks(f: CellFacts, coef: number): Set<string> {
  // errors.raised always: a raise is what any cell can meet first
  const checks = new Set(ALL_CHECKS.filter((c) => !f.seen?.failed.length || (c === "parity.norm" && !f.minimal) || c === "errors.raised" || f.seen.failed.includes(c)));
  // errors.nonfinite can only fail on a non-finite norm with error_if_nonfinite set, scaling.nonempty only when clip_coef < 1.
  if (f.errorIfNonfinite && !Number.isFinite(f.reference.totalNorm)) checks.add("errors.nonfinite");
  else checks.delete("errors.nonfinite");
  if (!(coef < 1)) checks.delete("scaling.nonempty");
  return checks;
}

/** The script's MESHES and, when the call uses it, the framework's support module: a script must build its inputs as the framework's users do. */
function supportCodeFor(subject: TorchSubject, used: ReadonlySet<ArgSource>): string {
  // The framework's support module, verbatim, when the script uses it: its meshes (MESHES), its root (FSDP1) or the
  // object it builds (torchrec's GradientClippingOptimizer).
  const sup = subject.framework ? supportText(subject.framework.name) : null;
  const embed = sup !== null && (/^MESHES = /m.test(sup.text) || used.has("fsdp1_module") || used.has("torchrec_optimizer") || used.has("deepspeed_engine"));
  if (!embed) return "MESHES = {}  # the parameters' meshes: one dimension per axis of size > 1";
  return [
    ...(sup.text.includes("JobError") ? ["JobError = RuntimeError  # what the support module raises for a cell it cannot build"] : []),
    ...(sup.text.includes("functools.") ? ["import functools"] : []),
    sup.text,
    ...(/^MESHES = /m.test(sup.text) ? [] : ["MESHES = {}  # the parameters' meshes: one dimension per axis of size > 1"]),
  ].join("\n");
}

/** The template's features this script keeps (its checks among them): what the `#?` tags of repro_template.py select. */
function scriptFeatures(cell: Cell, subject: TorchSubject, f: CellFacts, checks: ReadonlySet<string>, used: ReadonlySet<ArgSource>, cost: boolean): Set<string> {
  const experts = subject.convention.experts === "dense-mesh-when-ep1" && f.layout.ep === 1;
  const tolerance = torchTolerance(cell.dtype, subject.options.tolerance);
  return new Set([
    ...checks,
    ...(f.minimal ? ["minimal"] : []),
    ...(cost && checks.has("comm.budget") ? ["cost"] : []), // REPRO_COST_PAIRS: the clip timed against fused_clip
    ...(used.has("grads_for_norm") ? ["counted"] : []), // build() marks the copies Megatron's selection counts
    ...(used.has("mpu") || used.has("grads_for_norm_deepspeed") ? ["mp-attrs"] : []), // and those DeepSpeed's reads
    ...(experts ? ["dense-experts"] : []),
    ...(f.model.params.some((p) => p.tp === "expert") ? ["experts"] : []),
    ...(f.model.ties.length ? ["ties"] : []),
    ...(f.regime.special !== null ? ["special"] : []),
    ...(checks.has("parity.tensors") && lowPrecisionDtype({ tolerance, cell }) ? ["coef-in-dtype"] : []), // the class accepts torch's coefficient
  ]);
}

/** Which parameters have a gradient, as one Python expression checked against the regime over the manifest. */
function hasGradExpression(f: CellFacts, regimeName: string): string {
  const candidates: [string, (i: number) => boolean][] = [
    ["lambda i: True", () => true],
    ["lambda i: False", () => false],
    ["lambda i: i % 3 != 1", (i) => i % 3 !== 1],
  ];
  const hasGrad = candidates.find(([, g]) => f.model.params.every((p) => f.regime.hasGrad(p.index) === g(p.index)))?.[0];
  if (!hasGrad) throw new Error(`internal: regime ${regimeName}: which parameters have a gradient has no Python expression here`);
  return hasGrad;
}

/** The script's @@CELL@@ block: the cell as a handful of Python constants, then the model (whole, or the minimised parameters). */
function cellCodeText(cell: Cell, f: CellFacts, x: { target: string; hasGrad: string; coef: number; tolerance: ToleranceClass; features: ReadonlySet<string>; kept: readonly LogicalParam[] }): string {
  const { model, layout } = f;
  const specialParam = f.regime.special === null ? null : (model.params.find((p) => f.regime.hasGrad(p.index))?.name ?? null);
  const special = specialParam === null ? "None" : `(${JSON.stringify(specialParam)}, ${pyFloat(f.regime.special!)})`;
  const budgets = new Set(f.commBudgets).size === 1 ? `[${f.commBudgets[0]}] * ${f.world}` : `[${f.commBudgets.join(", ")}]`;
  const ties = model.ties.filter((t) => x.kept.some((p) => p.name === t.canonical));
  const tiesCode = `[${ties.flatMap((t) => t.replicas.map((r) => `(${JSON.stringify(t.canonical)}, ${JSON.stringify(r.fqn)})`)).join(", ")}]`;
  return [
    `CELL_ID, TARGET, UNSUPPORTED = ${JSON.stringify(f.id)}, ${JSON.stringify(x.target)}, ${JSON.stringify(f.unsupported ? `(${x.target} does not support this configuration: ${f.unsupported})` : "")}`,
    `WORLD, LAYOUT = ${f.world}, {${LAYOUT_AXES.map((a) => `"${a}": ${layout[a]}`).join(", ")}}`,
    f.minimal
      ? `DTYPE, HAS_GRAD = "${cell.dtype}", ${x.hasGrad}  # regime ${cell.regime}`
      : `DTYPE, SEED, STEP, MODE, EXP, SPECIAL, HAS_GRAD = "${cell.dtype}", ${cell.seed}, ${f.step}, "${f.regime.mode}", ${f.regime.exp}, ${special}, ${x.hasGrad}  # regime ${cell.regime}`,
    `NORM_TYPE, MAX_NORM, ERROR_IF_NONFINITE = ${cell.normType === Infinity ? "math.inf" : pyFloat(cell.normType)}, ${pyFloat(f.maxNorm)}, ${f.errorIfNonfinite ? "True" : "False"}`,
    // NORM_BOUND: |norm - ref| / ref the class allows (fp32-accum: 8 sqrt(n + 1) 2^-24 / p + 4 2^-24, n the cell's elements)
    ...(f.minimal
      ? []
      : [
          `REFERENCE_NORM, CLIP_COEF, TOLERANCE, NORM_BOUND = ${pyFloat(f.reference.totalNorm)}, ${pyFloat(x.coef)}, "${x.tolerance}", ` +
            `${pyFloat(normTolerance(x.tolerance, cell.normType, f.reference.elementsWithGrad))}  # as clip-parity computes them`,
        ]),
    ...(x.features.has("comm.budget") ? [`COMM_BUDGET, COMM_WHY = ${budgets}, "${f.commWhy}"  # collectives across ranks per rank, as clip-parity's comm.budget`] : []),
    ...(f.minimal
      ? [
          `TIES, LOGICAL = ${tiesCode}, [  # (index, name, shape, tp style, stage): the first of each stage and placement of ${model.name}'s ${model.params.length}`,
          ...x.kept.map((p) => `    (${p.index}, ${JSON.stringify(p.name)}, [${p.shape.join(", ")}], "${p.tp}", ${stageOfParam(p, model.nLayers, layout.pp)}),`),
          "]",
        ]
      : [`N_LAYERS, TIES = ${model.nLayers}, ${tiesCode}`, ...modelCode(model)]),
  ].join("\n");
}

/** The docstring's account of a minimised script: how few parameters it keeps and what their gradients are, so a reader knows it is not the whole cell. */
function minimisedSummary(cell: Cell, f: CellFacts, kept: readonly LogicalParam[], features: ReadonlySet<string>) {
  if (!f.minimal) return null;
  const budget = `${new Set(f.commBudgets).size === 1 ? f.commBudgets[0] : `[${f.commBudgets.join(", ")}] by rank`} (${f.commWhy})`;
  return {
    kept: kept.length,
    of: f.model.params.length,
    gradients: kept.some((p) => f.regime.hasGrad(p.index)) ? "with random gradients: the layout alone makes this failure" : `with no gradient on any rank (regime ${cell.regime}), which alone makes this failure`,
    budget: features.has("comm.budget") ? budget : null,
  };
}

/**
 * repro_template.py with its tagged lines kept or dropped for `features`, and its placeholders filled in.
 * Template lines tagged `#? a b`, and blocks between `#?{ a b` and `#?}`, are kept only when the script makes one of
 * those checks or uses that feature (`!f`: only when it does not); the tags themselves never reach the script.
 */
function fillTemplate(features: ReadonlySet<string>, parts: { doc: string; cellCode: string; call: string; supportCode: string }): string {
  const keep = (tags: string) => tags.split(" ").some((f) => (f.startsWith("!") ? !features.has(f.slice(1)) : features.has(f)));
  const skipping: boolean[] = [];
  const template = readFileSync(TEMPLATE, "utf8")
    .split("\n")
    .flatMap((line) => {
      const block = /^\s*#\?\{ ([\w.! -]+)$/.exec(line);
      if (block) return skipping.push(skipping.some(Boolean) || !keep(block[1]!)), [];
      if (/^\s*#\?\}$/.test(line)) return skipping.pop(), [];
      if (skipping.some(Boolean)) return [];
      const m = /^(.*?)\s*#\? ([\w.! -]+)$/.exec(line);
      return !m ? [line] : keep(m[2]!) ? [m[1]!] : [];
    })
    .join("\n");
  return template
    .replace("@@DOC@@", () => parts.doc)
    .replace("@@CELL@@", () => parts.cellCode)
    .replace("@@CALL@@", () => parts.call)
    .replace("@@GENERATE@@", () => generatorText())
    .replace("@@SUPPORT@@", () => parts.supportCode)
    // the hang as clip-parity tells it from a raise (subject.ts), the same pattern (a Python raw string)
    .replace("@@TIMEOUT_RE@@", () => `r"${COLLECTIVE_TIMEOUT_RE.source}"`)
    .replace(/\n{4,}/g, "\n\n\n");
}

/**
 * Everything the script needs, computed without running anything (the reference is the harness's own). `seen` is
 * clip-parity's run of the cell, if it ran; otherwise the committed docs/frameworks.json record is used when it has
 * the cell.
 */
export function buildExport(cell: Cell, subject: TorchSubject, run: CellResult | null, records?: FrameworksData, full = false, cost = false): ExportData {
  const f = cellFacts(cell, subject, run, records, full);
  const coef = clipCoefficient(f.maxNorm, f.reference.totalNorm);
  const checks = scriptChecks(f, coef);
  const readsGrads = checks.has("parity.tensors") || checks.has("scaling.nonempty");
  const { code: call, used } = renderCallParts(subject.convention, { foreach: subject.options.foreach, expertsPresent: f.expertsPresent, taken: f.seen?.paths, readsGrads });
  const supportCode = supportCodeFor(subject, used);
  const tolerance = torchTolerance(cell.dtype, subject.options.tolerance);
  const features = scriptFeatures(cell, subject, f, checks, used, cost);
  const hasGrad = hasGradExpression(f, cell.regime);
  const target = subject.framework ? `${subject.framework.name} ${subject.info.packageVersion ?? ""}`.trim() : subject.name.slice("torch:".length);
  const kept = f.minimal ? minimalParams(f.model, f.layout, f.regime.hasGrad) : f.model.params;
  const cellCode = cellCodeText(cell, f, { target, hasGrad, coef, tolerance, features, kept });
  const fileName = reproFileName(f.id);
  const doc = docText({
    ...{ cell, layout: f.layout, world: f.world, model: f.model.name, regime: cell.regime, maxNorm: f.maxNorm, errorIfNonfinite: f.errorIfNonfinite, subject, target, unsupported: f.unsupported, outside: f.outside, seen: f.seen },
    ...{ reference: f.reference.totalNorm, fileName, checks: ALL_CHECKS.filter((c) => checks.has(c)), cost: features.has("cost") },
    minimised: minimisedSummary(cell, f, kept, features),
  });
  const script = fillTemplate(features, { doc, cellCode, call, supportCode });
  return { cell, script, fileName, minimised: f.minimal };
}

const LAYOUT_AXES = ["pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"] as const;
const DTYPE_WORDS: Record<DType, string> = { f32: "float32", bf16: "bfloat16", f16: "float16" };

/** Hard-wraps `text` at `width` columns, continuation lines indented by `indent`. */
function wrap(text: string, indent: string, width = 116): string[] {
  const out: string[] = [];
  let line = "";
  for (const word of text.split(/ +/)) {
    if (line && line.length + 1 + word.length > width) {
      out.push(line);
      line = indent + word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) out.push(line);
  return out;
}

/** The script's docstring: framework, configuration, cause in words, expected against got, how to run it. */
function docText(x: {
  cell: Cell;
  /** The script times the clip against its fused variant under REPRO_COST_PAIRS (the `cost` feature). */
  cost: boolean;
  layout: ValidLayout;
  world: number;
  model: string;
  regime: string;
  maxNorm: number;
  errorIfNonfinite: boolean;
  subject: TorchSubject;
  target: string;
  unsupported: string | null;
  /** Why the cell lies outside the configurations the framework's trainer builds (its file's `configurations`). */
  outside: string | null;
  seen: Seen | null;
  reference: number;
  fileName: string;
  checks: string[];
  /** A minimised script: parameters kept of the model's, and the collectives' budget per rank when it checks one. */
  /** `gradients`: what the kept parameters hold, as the header says it (random gradients, or none at all). */
  minimised: { kept: number; of: number; gradients: string; budget: string | null } | null;
}): string {
  // "Label:     text", the text wrapped under itself.
  const field = (label: string, text: string) => wrap(text, "", 104).map((l, i) => (i === 0 && label ? `${label}:` : "").padEnd(12) + l);
  const norm = x.cell.normType === Infinity ? "inf-norm" : `${x.cell.normType}-norm`;
  const fw = x.subject.framework;
  const who = fw?.name ?? x.target;
  const config =
    `layout ${formatLayout(x.layout)} (${x.world} ranks), model ${x.model}, ${DTYPE_WORDS[x.cell.dtype]} gradients, ${norm}, regime ${x.regime} ` +
    `(seed ${x.cell.seed}${x.cell.step ? `, step ${x.cell.step}` : ""}), max_norm ${x.maxNorm}, error_if_nonfinite ${x.errorIfNonfinite ? "True" : "False"}`;
  const lines = [
    `Reproducer: ${x.target} on ${formatLayout(x.layout)} / ${x.model} / ${DTYPE_WORDS[x.cell.dtype]} / ${norm}${x.seen?.failed.length ? `: ${x.seen.failed.join(", ")} fail` : ""}`,
    "",
    ...field("Framework", `${x.target}${fw?.package === "torch" ? "" : ` (torch ${x.subject.info.torch})`}: ${fw ? fw.description : "called as torch.nn.utils.clip_grad_norm_ is"}`),
    // a pinned release: the versions the script reproduces on, as pip installs them
    ...(x.subject.spec.pins.length ? field("Releases", `pip install ${x.subject.spec.pins.map((p) => `${p.name}==${p.version}`).join(" ")}`) : []),
    // No claim that the framework supports the configuration unless its file cites where its trainer builds it.
    ...field(
      "Config",
      x.unsupported || !fw
        ? config
        : x.outside
          ? `${config}: NOT a configuration ${who}'s trainer builds (${x.outside})`
          : fw.configurations
            ? `${config}: within what ${who}'s trainer builds, per adapters/torch/frameworks/${fw.name}.json "configurations"`
            : config,
    ),
  ];
  if (x.unsupported) lines.push(...field("Supported", `NO: ${who} does not support this configuration (${x.unsupported}), so the script never reports REPRODUCED`));
  if (x.unsupported) lines.push(...field("Cause", `none to report: clip-parity skips this cell for ${who} (not applicable)`));
  else if (!x.seen) lines.push(...field("Cause", "not known: exported without running the cell (--no-run), and docs/frameworks.json has no record of it"));
  else if (!x.seen.failed.length) lines.push(...field("Cause", `none: every check passed in ${x.seen.source}`));
  else x.seen.causes.forEach((k, i) => lines.push(...field(i === 0 ? "Cause" : "", `- ${causeText(k, fw?.explain ?? {})}`)));
  if (x.minimised) {
    lines.push(
      ...field(
        "Minimised",
        `${x.minimised.kept} of ${x.model}'s ${x.minimised.of} parameters (the first of each pipeline stage and placement of its gradient) ` +
          `${x.minimised.gradients}.` +
          " `clip-parity export --full` writes the cell's own gradients and every check.",
      ),
      ...field("Expected", `a norm on every rank, no exception${x.minimised.budget ? `; collectives across ranks per rank at most ${x.minimised.budget}` : ""}`),
    );
  } else lines.push(...field("Expected", `norm ${x.reference} on every rank (exact; the script recomputes it in float64), every gradient scaled by clip_coef ${clipCoefficient(x.maxNorm, x.reference)}`));
  if (x.seen?.failed.length) {
    // the frames clip-parity names ("(at file:line fn < ...)") are where it was raised inside torch's dispatch: the script shows the error itself
    const cut = (m: string) => (m.length > 240 ? `${m.slice(0, 240).replace(/\s+\S*$/, "")} ...` : m); // at a word, said so
    const got = x.seen.failed.map((c) => `${c}: ${cut((x.seen!.messages[c] ?? "").replace(/ \(at [^()]*\)$/, ""))}`);
    got[got.length - 1] += ` (${x.seen.source})`;
    got.forEach((g, i) => lines.push(...field(i === 0 ? "Got" : "", g)));
  }
  lines.push(
    "",
    ...wrap(
      `Written by clip-parity export; needs torch${x.minimised ? "" : ", numpy"}${fw && fw.package !== "torch" ? ` and ${fw.package}` : ""}${fw ? "" : " and the function under test"} (gloo; NCCL with a ` +
        `GPU per rank). Checks ${x.checks.join(", ")}: REPRODUCED (exit 1) if one fails${x.seen?.failed.length ? " as above" : ""}, else NOT REPRODUCED.`,
      "",
    ),
    `    torchrun --standalone --nproc-per-node ${x.world} ${x.fileName}`,
    ...(x.cost
      ? [
          ...wrap("With REPRO_COST_PAIRS=N it then times the clip against fused_clip (the same norm from one all_reduce) in N pairs and prints, on rank 0, COST with each pair's seconds:", ""),
          `    REPRO_COST_PAIRS=11 torchrun --standalone --nproc-per-node ${x.world} ${x.fileName}`,
        ]
      : []),
    // One line, not wrapped: a command is copied whole.
    ...(x.seen?.repro ? [`The cell in clip-parity: ${x.seen.repro}`] : []),
  );
  return docstringText(lines.join("\n").replace(/ +$/gm, ""));
}

/** Text for the script's docstring: control characters as escapes, backslashes and quotes that cannot end it. */
function docstringText(text: string): string {
  return escapeControls(text, "\n").replace(/\\/g, "\\\\").replace(/"""/g, '\\"\\"\\"');
}

export interface ExportRequest {
  cell: Cell;
  outDir: string;
  /** Run the cell through the adapter first and put what failed in the script's header (default true). */
  run?: boolean;
  options?: Partial<TorchOptions>;
  /** With run false: the frameworks run whose record of the cell goes in the header (default docs/frameworks.json). */
  records?: FrameworksData;
  /** The whole cell (its gradients, every check) even for a failure of the layout alone, which is otherwise minimised. */
  full?: boolean;
  /** The cell's result from a run already made (a history row's): put in the header, nothing run again. */
  seen?: CellResult;
  /** For a comm.budget cell: the script also times the clip against its fused variant under REPRO_COST_PAIRS=N (note-cost.ts). */
  cost?: boolean;
}

/** Writes the script atomically into outDir; returns its path and what the harness saw. */
export async function exportCell(req: ExportRequest): Promise<{ path: string; seen: CellResult | null; data: ExportData }> {
  if (!req.cell.subject.startsWith("torch:")) {
    throw new InputError(
      `export: subject "${req.cell.subject}" is not a torch: subject; a built-in or module subject runs inside the harness ` +
        "(clip-parity cell ... --dump DIR writes its tensors)",
    );
  }
  const subject = loadTorchSubject(req.cell.subject, req.options) as TorchSubject;
  let seen: CellResult | null = req.seen ?? null;
  if (req.run !== false && !req.seen) {
    try {
      seen = await runCell(req.cell, { subject });
    } finally {
      await closeTorchSessions();
    }
  }
  const data = buildExport(req.cell, subject, seen, req.records, req.full, req.cost);
  const dir = resolve(req.outDir);
  const path = join(dir, data.fileName);
  writeFileAtomic(path, data.script, 0o755);
  return { path, seen, data };
}

export { formatLayout };

/**
 * `clip-parity export`: one cell of a torch: subject as a standalone PyTorch script (torchrun, gloo or NCCL)
 * that depends on nothing of this project: it embeds SPEC §5's generator and an exact reference, builds the
 * cell's DTensors on every rank from the same values, calls the target the way the subject's convention
 * says, and prints expected against got. What a user attaches to an upstream issue.
 *
 * The script is adapters/torch/repro_template.py with three holes filled: the cell as JSON (@@CELL@@), the
 * call as Python code generated from the convention (@@CALL@@), and the header (what clip-parity saw).
 */
import { escapeControls } from "../../results/controls.ts";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { InputError } from "../../errors.ts";
import { writeFileAtomic } from "../../util/fs.ts";
import { formatLayout, parseLayout, validateLayout, worldSize } from "../../layout/layout.ts";
import { getModel, MODEL_NAMES } from "../../model/models.ts";
import { planWorld } from "../../model/plan.ts";
import { computeReference } from "../../clip/reference.ts";
import { maxNormOf, REGIMES, regimeSpec, type Regime } from "../../clip/regimes.ts";
import { meshesOf, reductionGroup } from "../../world/context.ts";
import type { DType } from "../../clip/api.ts";
import { runCell } from "../../run/cell.ts";
import { cellId, type Cell } from "../../spec/cell.ts";
import type { CellResult } from "../../results/types.ts";
import { ADAPTER_DIR, type TorchOptions } from "./options.ts";
import type { Arg, Call, Convention } from "./protocol.ts";
import { closeTorchSessions, countedHere, loadTorchSubject, refusePartial, torchTolerance, type TorchSubject } from "./subject.ts";

export const TEMPLATE = join(ADAPTER_DIR, "repro_template.py");
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
    if (!(REGIMES as readonly string[]).includes(regime!)) throw new InputError(`--cell "${id}": regime "${regime}" is not one of ${REGIMES.join(", ")}`);
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
      return "[q.grad for q in LP if q.grad is not None and q.clip_parity_counted]";
    case "max_norm":
      return "MAX_NORM";
    case "norm_type":
      return "NORM_TYPE";
    case "error_if_nonfinite":
      return "ERROR_IF_NONFINITE";
    case "foreach":
      return g.foreach === null ? null : py(g.foreach);
    case "pp_mesh":
      return 'meshes["pp"] if CELL["layout"]["pp"] > 1 else None';
    case "world_group":
      return "dist.group.WORLD";
    case "ep_enabled":
      return 'CELL["layout"]["ep"] > 1';
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
  } else {
    const key = JSON.stringify(step.receiver);
    let inst = g.instances.get(key);
    if (!inst) {
      inst = `receiver_${g.instances.size + 1}`;
      g.instances.set(key, inst);
      const factory = importName(g, step.receiver.factory);
      const kw = Object.entries(step.receiver.kwargs).map(([k, a]) => `${k}=${argExpr(g, a)}`);
      g.lines.push("", `def ${inst}():`, `    """${step.receiver.factory}(${kw.join(", ")}), one per process, as the trainer holds it."""`);
      g.lines.push(`    global _${inst}`, `    if _${inst} is None:`, `        _${inst} = ${factory}(${kw.join(", ")})`, `    return _${inst}`, "", `_${inst} = None`);
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

/** `def clip(params, meshes)`: the convention's setup, path choice and steps as plain Python. */
export function renderCall(c: Convention, opts: { foreach: boolean | null; expertsPresent: boolean; cell: { maxNorm: number; normType: number; errorIfNonfinite: boolean } }): string {
  const g: Gen = { imports: new Map(), names: new Set(["P", "LP", "named", "meshes", "params", "kw", "sig", "ret"]), instances: new Map(), lines: [], foreach: opts.foreach, expertsPresent: opts.expertsPresent };
  const body: string[] = [];
  const ind = "    ";
  const usesLocal = JSON.stringify(c).includes('"local_params"') || JSON.stringify(c).includes('"grads_for_norm"');
  body.push(`${ind}named = [(p["fqn"], param) for p, param in params]`);
  body.push(`${ind}P = [param for _, param in named]`);
  if (usesLocal) body.push(`${ind}LP = local_params(params)  # plain tensors over the local shards`);
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
    out.push(...before.map((l) => pad + l), `${pad}${lhs} = ${expr}`);
    if (last) out.push(`${pad}return ${norm === "return" ? lhs : norm.result}`);
    return out;
  };
  c.paths.forEach((p, i) => {
    const single = c.paths.length === 1 && p.when === "always";
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
  const consts = [
    `MAX_NORM = ${py(opts.cell.maxNorm)}`,
    `NORM_TYPE = ${opts.cell.normType === Infinity ? "math.inf" : py(opts.cell.normType)}`,
    `ERROR_IF_NONFINITE = ${py(opts.cell.errorIfNonfinite)}`,
  ];
  return ["import inspect", ...g.lines, "", ...consts, "", "", "def clip(params, meshes):", ...body].join("\n").replace(/\n{3,}/g, "\n\n");
}

// ---- the cell -------------------------------------------------------------------------------------------

export interface ExportData {
  cell: Cell;
  script: string;
  fileName: string;
}

/** Everything the script needs, computed without running anything (the reference is the harness's own). */
export function buildExport(cell: Cell, subject: TorchSubject, seen: CellResult | null): ExportData {
  const layout = validateLayout(cell.layout);
  const world = worldSize(layout);
  const model = getModel(cell.model);
  const regime = regimeSpec(cell.regime);
  const step = cell.step ?? 0;
  const reference = computeReference(model, cell.dtype, cell.normType, cell.regime, cell.seed, step);
  const maxNorm = maxNormOf(cell, reference.totalNorm);
  const errorIfNonfinite = cell.errorIfNonfinite ?? regime.errorIfNonfinite;
  const plan = planWorld(model, layout);
  refusePartial(plan.flat(), `export --cell ${cellId(cell)}`);
  const meshes = meshesOf(layout);
  const specialParam = regime.special === null ? null : (model.params.find((p) => regime.hasGrad(p.index))?.name ?? null);
  const commBudgets = plan.map((params, rank) => {
    const groups = new Set(params.map((p) => reductionGroup(meshes, rank, p, p.placements.map((x) => x.kind !== "replicate")).key));
    return Math.max(1, groups.size) + 1;
  });
  const num = (x: number) => (Number.isFinite(x) ? x : Number.isNaN(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
  const id = cellId(cell);
  const data = {
    id,
    target: subject.framework ? `${subject.name}: ${subject.framework.trainer}` : subject.name,
    world,
    layout,
    dtype: cell.dtype,
    seed: cell.seed,
    step,
    normType: cell.normType === Infinity ? "inf" : cell.normType,
    maxNorm,
    errorIfNonfinite,
    tolerance: torchTolerance(cell.dtype, subject.options.tolerance),
    experts: subject.convention.experts,
    regime: { mode: regime.mode, exp: regime.exp, special: regime.special === null ? null : num(regime.special), specialParam },
    referenceNorm: num(reference.totalNorm),
    commBudgets,
    logical: model.params.map((p) => ({ name: p.name, shape: p.shape, hasGrad: regime.hasGrad(p.index) })),
    ranks: plan.map((params, rank) =>
      params.map((p) => ({
        fqn: p.fqn,
        name: p.name,
        canonical: p.canonical,
        mesh: p.mesh,
        meshAxes: p.meshAxes,
        placements: p.placements,
        globalShape: p.block.globalShape,
        block: { start: p.block.start, len: p.block.len },
        hasGrad: regime.hasGrad(p.index),
        countedHere: countedHere(p, layout, rank),
      })),
    ),
  };
  const expertsPresent = plan.some((ps) => ps.some((p) => p.mesh === "sparse"));
  const call = renderCall(subject.convention, { foreach: subject.options.foreach, expertsPresent, cell: { maxNorm, normType: cell.normType, errorIfNonfinite } });
  const fileName = `repro-${id.replace(/[^A-Za-z0-9_.-]+/g, "-").replace(/^-+|-+$/g, "")}.py`;
  const failed = seen?.checks.filter((c) => c.status === "fail") ?? [];
  const seenText = seen
    ? failed.length
      ? `What clip-parity saw (the same cell through its PyTorch adapter):\n\n${failed
          .map((c) => `    ${c.id}: ${c.message.split("\n")[0]!.slice(0, 400)}`)
          .join("\n")}\n\nReproduce it in clip-parity: ${seen.repro}`
      : `clip-parity saw this cell pass every check (${seen.repro}).`
    : "Exported without running the cell in clip-parity (--no-run).";
  // One parameter per line: a reader of the script (an upstream maintainer) can find a rank's copies.
  const json = [
    "{",
    ...Object.entries(data).map(([k, v], i, all) => {
      const end = i === all.length - 1 ? "" : ",";
      if (k === "logical") return `  "logical": [\n${(v as unknown[]).map((x) => `    ${JSON.stringify(x)}`).join(",\n")}\n  ]${end}`;
      if (k === "ranks") {
        const ranks = (v as unknown[][]).map((ps, r) => `    [\n      ${ps.map((x) => JSON.stringify(x)).join(",\n      ")}\n    ]`);
        return `  "ranks": [\n${ranks.join(",\n")}\n  ]${end}`;
      }
      return `  ${JSON.stringify(k)}: ${JSON.stringify(v)}${end}`;
    }),
    "}",
  ].join("\n");
  if (json.includes("'''")) throw new Error("internal: the cell's JSON holds ''' and cannot be embedded");
  const script = readFileSync(TEMPLATE, "utf8")
    // a docstring takes no NUL and shows no control character: both as \x.. text (escapeControls)
    .replace("@@TITLE@@", () => docstringText(`Reproduces clip-parity cell ${id}`))
    .replace("@@WORLD@@", String(world))
    .replace("@@FILE@@", fileName)
    .replace("@@SEEN@@", () => docstringText(seenText))
    .replace("@@CELL@@", () => json)
    .replace("@@CALL@@", () => call);
  return { cell, script, fileName };
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
  let seen: CellResult | null = null;
  if (req.run !== false) {
    try {
      seen = await runCell(req.cell, { subject });
    } finally {
      await closeTorchSessions();
    }
  }
  const data = buildExport(req.cell, subject, seen);
  const dir = resolve(req.outDir);
  const path = join(dir, data.fileName);
  writeFileAtomic(path, data.script, 0o755);
  return { path, seen, data };
}

export { formatLayout };

/**
 * Model manifests (SPEC §4): the ordered list of logical parameters of a model, with shape, kind, layer
 * and TP style, plus tie groups (one logical parameter, several physical copies on different PP stages).
 */
import { InputError, ModelError } from "../errors.ts";
import type { AxisName } from "../layout/mesh.ts";

export type ParamKind = "embedding" | "attention" | "ffn" | "expert" | "router" | "norm" | "output" | "mtp";

/** How TP splits it (SPEC §4 default placements). "expert": the [E,out,in] expert rule on the sparse mesh. */
export type TpStyle = "colwise" | "rowwise" | "replicate" | "expert";

export interface LogicalParam {
  /** position in the manifest (the `sparse` regime drops index % 3 == 1) */
  index: number;
  /** canonical FQN, e.g. "layers.3.attention.wq.weight" */
  name: string;
  shape: number[];
  kind: ParamKind;
  /** transformer layer index; null for embedding/final norm/output/mtp */
  layer: number | null;
  tp: TpStyle;
  /**
   * Mesh axes (of its mesh, without pp) over which its gradient is Partial(sum) instead of the default
   * placement: each rank along them holds a partial gradient of the full extent, and the logical
   * gradient is their sum (gradients/specs.ts partialSpecs). Absent: no Partial axis. Never on a tied parameter.
   */
  partialOver?: readonly AxisName[];
}

/** A tied/shared weight: the canonical logical param and its extra physical copies (replicas). */
export interface TieGroup {
  canonical: string;
  replicas: { fqn: string; stage: "last"; tp: TpStyle }[];
}

export interface ModelManifest {
  name: string;
  nLayers: number;
  params: LogicalParam[];
  ties: TieGroup[];
  /** logical elements (replicas not counted); a number is exact up to 2^53 */
  totalParams: number;
  description: string;
}

/** Product of a shape's dims (1 for a scalar). */
export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Accumulates parameters in order and assigns indices. */
export class ManifestBuilder {
  readonly params: LogicalParam[] = [];
  readonly ties: TieGroup[] = [];
  private readonly names = new Set<string>();

  constructor(
    readonly name: string,
    readonly nLayers: number,
  ) {}

  add(name: string, shape: number[], kind: ParamKind, layer: number | null, tp: TpStyle): this {
    if (this.names.has(name)) throw new ModelError(`model ${this.name}: duplicate parameter ${name}`);
    for (const d of shape) {
      if (!Number.isSafeInteger(d) || d < 1) throw new ModelError(`model ${this.name}: ${name} has a bad shape [${shape.join(", ")}]`);
    }
    if (tp === "colwise" && shape.length < 1) throw new ModelError(`model ${this.name}: colwise ${name} needs a dim 0`);
    if (tp === "rowwise" && shape.length < 2) throw new ModelError(`model ${this.name}: rowwise ${name} needs a dim 1`);
    if (tp === "expert" && shape.length !== 3) throw new ModelError(`model ${this.name}: expert ${name} must be [E, out, in]`);
    this.names.add(name);
    this.params.push({ index: this.params.length, name, shape: [...shape], kind, layer, tp });
    return this;
  }

  /** A torch nn.Linear(inDim, outDim, bias=False): weight [out, in]. */
  linear(name: string, outDim: number, inDim: number, kind: ParamKind, layer: number | null, tp: TpStyle): this {
    return this.add(`${name}.weight`, [outDim, inDim], kind, layer, tp);
  }

  /** An RMSNorm weight [dim], replicated on TP. */
  norm(name: string, dim: number, layer: number | null, kind: ParamKind = "norm"): this {
    return this.add(`${name}.weight`, [dim], kind, layer, "replicate");
  }

  tie(canonical: string, replicaFqn: string, tp: TpStyle): this {
    if (!this.names.has(canonical)) throw new ModelError(`model ${this.name}: tie to unknown parameter ${canonical}`);
    if (this.names.has(replicaFqn)) throw new ModelError(`model ${this.name}: replica ${replicaFqn} is also a logical parameter`);
    let g = this.ties.find((t) => t.canonical === canonical);
    if (!g) {
      g = { canonical, replicas: [] };
      this.ties.push(g);
    }
    g.replicas.push({ fqn: replicaFqn, stage: "last", tp });
    return this;
  }

  /**
   * Leaves the gradients of the params `which` selects Partial(sum) over `axes` (sequence parallel's
   * norm weights over tp, before their all-reduce). A tied parameter cannot be Partial: its copies'
   * gradients are already the finalize regime's partials.
   */
  partialOver(which: (p: LogicalParam) => boolean, axes: readonly AxisName[]): this {
    for (const p of this.params) if (which(p)) p.partialOver = [...axes];
    return this;
  }

  build(description: string): ModelManifest {
    for (const t of this.ties) {
      const p = this.params.find((x) => x.name === t.canonical);
      if (p?.partialOver) throw new ModelError(`model ${this.name}: ${p.name} is tied and cannot be Partial over ${p.partialOver.join(", ")}`);
    }
    let total = 0;
    for (const p of this.params) total += numel(p.shape);
    if (!Number.isSafeInteger(total)) throw new ModelError(`model ${this.name}: total ${total} is not exact`);
    return {
      name: this.name,
      nLayers: this.nLayers,
      params: this.params,
      ties: this.ties,
      totalParams: total,
      description,
    };
  }
}

/** Logical param by canonical name; ModelError when absent. */
export function findParam(m: ModelManifest, name: string): LogicalParam {
  const p = m.params.find((x) => x.name === name);
  if (!p) throw new ModelError(`model ${m.name} has no parameter "${name}"`);
  return p;
}

/**
 * Training steps AdamW on whole gradients: a model that leaves a gradient Partial(sum) (its reduction
 * still to come) is refused by train and resume, naming the first such parameter.
 */
export function refusePartialGradients(m: ModelManifest, what: string): void {
  const p = m.params.find((x) => x.partialOver?.length);
  if (p) throw new InputError(`${what}: model ${m.name} leaves ${p.name}'s gradient Partial(sum) over ${p.partialOver!.join(", ")}; training needs reduced gradients`);
}

/** Sum of logical elements of the params for which `pred` holds. */
export function countParams(m: ModelManifest, pred: (p: LogicalParam) => boolean = () => true): number {
  let n = 0;
  for (const p of m.params) if (pred(p)) n += numel(p.shape);
  return n;
}

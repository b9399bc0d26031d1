/**
 * A backend: the tensors of one cell, owned by the native store and charged to ranks, plus the
 * per-rank memory ledger with named stages (like `torch.cuda.memory_stats` snapshots).
 *
 * The TypeScript side keeps the set of live tensors so that a cell can always be torn down to zero,
 * whatever its subject did (a subject that threw, or one the liveness check aborted).
 */
import { ClipParityError } from "../errors.ts";
import type { DType, Exact, Ops, Tensor } from "../clip/api.ts";
import { exactAdd, exactToNumber, EXACT_ZERO } from "./exact.ts";
import { native } from "./native.ts";
import type { Block } from "../model/plan.ts";

export type BackendKind = "cpu" | "meta" | "cuda";
export const BACKEND_KINDS: readonly BackendKind[] = ["cpu", "meta", "cuda"];

export interface GenSpec {
  seed: bigint;
  step: number;
  name: string;
  dtype: DType;
  exp: number;
  mode: "gen" | "ones" | "zeros";
  specialIndex?: number;
  specialValue?: number;
}

export interface Mismatch {
  index: number;
  expected: number;
  actual: number;
}

export interface StageRecord {
  stage: string;
  liveBytes: number;
  peakBytes: number;
  /** cuda: the rank's device and what it reports at that moment (driver and allocator use included), beside the ledger. */
  device?: string;
  deviceFreeBytes?: number;
  deviceTotalBytes?: number;
}

class TensorHandle implements Tensor {
  constructor(
    readonly id: number,
    readonly dtype: DType,
    readonly shape: readonly number[],
    readonly rank: number,
  ) {}
  get numel(): number {
    return this.shape.reduce((a, b) => a * b, 1);
  }
}

export const DTYPE_BYTES: Record<DType, number> = { f32: 4, bf16: 2, f16: 2 };

export class Backend {
  readonly kind: BackendKind;
  readonly ranks: number;
  private readonly store: InstanceType<ReturnType<typeof native>["NativeStore"]>;
  private readonly live = new Map<number, TensorHandle>();
  private readonly stages: StageRecord[][];

  constructor(kind: BackendKind, ranks: number) {
    if (kind === "cuda") {
      // Ranks map to devices as rank % device count (native/core/src/cuda, docs/cuda.md).
      const status = native().cudaStatus();
      if (!status.present) throw new ClipParityError("E_NO_CUDA", `backend cuda: ${status.message}`);
    }
    this.kind = kind;
    this.ranks = ranks;
    try {
      this.store = new (native().NativeStore)(kind, ranks);
    } catch (err) {
      if (kind !== "cuda") throw err;
      throw new ClipParityError("E_NO_CUDA", `backend cuda: ${(err as Error).message}`);
    }
    this.stages = Array.from({ length: ranks }, () => []);
  }

  get isMeta(): boolean {
    return this.kind === "meta";
  }

  alloc(rank: number, dtype: DType, shape: readonly number[]): Tensor {
    const id = this.store.alloc(rank, dtype, [...shape]);
    const t = new TensorHandle(id, dtype, [...shape], rank);
    this.live.set(id, t);
    return t;
  }

  free(t: Tensor): void {
    if (!this.live.delete(t.id)) throw new ClipParityError("E_TENSOR", `tensor ${t.id} was already freed`, 1);
    this.store.free(t.id);
  }

  /** Frees every tensor still alive; returns how many there were. */
  freeAll(): number {
    const n = this.live.size;
    for (const id of this.live.keys()) this.store.free(id);
    this.live.clear();
    return n;
  }

  liveTensorCount(rank?: number): number {
    if (rank === undefined) return this.live.size;
    let n = 0;
    for (const t of this.live.values()) if (t.rank === rank) n++;
    return n;
  }

  liveBytes(rank: number): number {
    return this.store.liveBytes(rank);
  }
  peakBytes(rank: number): number {
    return this.store.peakBytes(rank);
  }
  resetPeak(rank: number): void {
    this.store.resetPeak(rank);
  }

  /** Records a named stage of every rank's ledger (and, on cuda, the device's own free/total readings). */
  markStage(stage: string): void {
    for (let r = 0; r < this.ranks; r++) {
      const rec: StageRecord = { stage, liveBytes: this.liveBytes(r), peakBytes: this.peakBytes(r) };
      const dev = this.kind === "cuda" ? this.store.deviceMemory(r) : null;
      if (dev) Object.assign(rec, { device: dev.device, deviceFreeBytes: dev.freeBytes, deviceTotalBytes: dev.totalBytes });
      this.stages[r].push(rec);
    }
  }
  stageProfile(rank: number): readonly StageRecord[] {
    return this.stages[rank];
  }

  fillGrad(t: Tensor, gen: GenSpec, block: Block): void {
    this.store.fillGrad(t.id, gen, block);
  }
  fillValue(t: Tensor, value: number): void {
    this.store.fillValue(t.id, value);
  }
  getElement(t: Tensor, index: number): number {
    return this.store.getElement(t.id, index);
  }
  setElement(t: Tensor, index: number, value: number): void {
    this.store.setElement(t.id, index, value);
  }
  verifyScaled(t: Tensor, gen: GenSpec, block: Block, coef: number): Mismatch | null {
    return this.store.verifyScaled(t.id, gen, block, coef) ?? null;
  }
  compare(a: Tensor, b: Tensor): Mismatch | null {
    return this.store.compare(a.id, b.id) ?? null;
  }
  hash(t: Tensor): string {
    return this.store.hash(t.id);
  }
  saveSafetensors(path: string, entries: { name: string; tensor: Tensor }[], metadata: Record<string, string>): void {
    this.store.saveSafetensors(
      path,
      entries.map((e) => ({ name: e.name, id: e.tensor.id })),
      metadata,
    );
  }

  /** Every tensor of a safetensors file (validated before anything is allocated), charged to `rank`. */
  loadSafetensors(path: string, rank: number): { name: string; tensor: Tensor }[] {
    return this.store.loadSafetensors(path, rank).map((e) => {
      const t = new TensorHandle(e.id, this.store.dtype(e.id) as DType, this.store.shape(e.id), rank);
      this.live.set(e.id, t);
      return { name: e.name, tensor: t };
    });
  }
  /** The validated header of a safetensors file: names, dtypes and shapes (no data is read). */
  inspectSafetensors(path: string): { name: string; dtype: DType; shape: number[] }[] {
    return this.store.inspectSafetensors(path);
  }
  safetensorsMetadata(path: string): Record<string, string> {
    return this.store.safetensorsMetadata(path);
  }

  /** One torch.optim.AdamW step in place (float32 state; native/core/src/optim.rs). */
  adamwStep(
    param: Tensor,
    grad: Tensor,
    expAvg: Tensor,
    expAvgSq: Tensor,
    step: number,
    hp: { lr: number; beta1: number; beta2: number; eps: number; weightDecay: number },
  ): void {
    this.store.adamwStep(param.id, grad.id, expAvg.id, expAvgSq.id, step, hp);
  }
  /** Copies the intersection of two blocks of one global tensor from src into dst; returns elements copied. */
  copyBlock(dst: Tensor, dstBlock: Block, src: Tensor, srcBlock: Block): number {
    return this.store.copyBlock(dst.id, dstBlock, src.id, srcBlock);
  }

  /** The ops a subject on `rank` gets: every new tensor is charged to that rank. */
  opsFor(rank: number): Ops {
    const s = this.store;
    const own = (t: Tensor, what: string): number => {
      if (!this.live.has(t.id)) throw new ClipParityError("E_TENSOR", `${what}: tensor ${t.id} is not alive`, 1);
      return t.id;
    };
    const wrap = (id: number): Tensor => {
      const t = new TensorHandle(id, s.dtype(id) as DType, s.shape(id), rank);
      this.live.set(id, t);
      return t;
    };
    return {
      sumAbsPow: (t, p) => s.sumAbsPow(own(t, "sumAbsPow"), p),
      exactSumAbsPow: (t, p) => {
        const id = own(t, "exactSumAbsPow");
        const bad = s.nonFiniteCount(id);
        const nonfinite = bad === 0 ? 0 : Number.isNaN(s.maxAbs(id)) ? NaN : Infinity;
        return { sum: s.exactSumAbsPow(id, p), nonfinite };
      },
      maxAbs: (t) => s.maxAbs(own(t, "maxAbs")),
      nonFiniteCount: (t) => s.nonFiniteCount(own(t, "nonFiniteCount")),
      scale_: (t, coef) => s.scale(own(t, "scale_"), coef),
      empty: (dtype, shape) => this.alloc(rank, dtype, shape),
      clone: (t) => wrap(s.clone(own(t, "clone"), rank)),
      narrow: (t, dim, start, length) => wrap(s.narrow(own(t, "narrow"), dim, start, length, rank)),
      cat: (ts, dim) => wrap(s.cat(ts.map((t) => own(t, "cat")), dim, rank)),
      copy_: (dst, src) => s.copyFrom(own(dst, "copy_"), own(src, "copy_")),
      free: (t) => this.free(t),
      exactZero: () => EXACT_ZERO,
      exactAdd,
      exactToNumber,
    };
  }

  /** Concatenation on behalf of a collective: the result is charged to `rank`. */
  catFor(rank: number, ts: readonly Tensor[], dim: number): Tensor {
    const id = this.store.cat(
      ts.map((t) => t.id),
      dim,
      rank,
    );
    const t = new TensorHandle(id, ts[0].dtype, this.store.shape(id), rank);
    this.live.set(id, t);
    return t;
  }
}

export type { Exact };

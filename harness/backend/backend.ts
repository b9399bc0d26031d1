/**
 * A backend: the tensors of one cell, owned by the native store and charged to ranks, plus the
 * per-rank memory ledger with named stages (like `torch.cuda.memory_stats` snapshots).
 *
 * The TypeScript side keeps the set of live tensors so that a cell can always be torn down to zero,
 * whatever its subject did (a subject that threw, or one the liveness check aborted).
 */
import { ClipParityError } from "../errors.ts";
import type { DType, Exact, Ops, Tensor } from "../subject/api.ts";
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
  mode: "gen" | "ones" | "zeros" | "neg-zeros";
  specialIndex?: number;
  specialValue?: number;
  /**
   * The finalize regime (SPEC §5): element i is the float32 sum, in this order, of the values
   * generated under each of these names (`name` is then a label), rounded once to `dtype`.
   */
  sumOf?: string[];
}

export interface Mismatch {
  index: number;
  expected: number;
  actual: number;
}

/** One gradient of `Backend.allocFillMany`: a tensor of `shape`, filled as `fillGrad(gen, block)` fills it. */
export interface FillItem {
  shape: readonly number[];
  gen: GenSpec;
  block: Block;
  /** As `alloc`'s owner: what the harness allocated it for (then a subject cannot free it). */
  owner?: string;
}

/** One check of `Backend.verifyScaledMany`: `verifyScaled(tensor, gen, block, coef)`. */
export interface VerifyItem {
  tensor: Tensor;
  gen: GenSpec;
  block: Block;
  coef: number;
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
  readonly shape: readonly number[];
  constructor(
    readonly id: number,
    readonly dtype: DType,
    shape: readonly number[],
    readonly rank: number,
  ) {
    // Frozen: a subject that rewrites a handle's id or shape gets a TypeError, not another tensor.
    this.shape = Object.freeze([...shape]);
    Object.freeze(this);
  }
  get numel(): number {
    return this.shape.reduce((a, b) => a * b, 1);
  }
}

export const DTYPE_BYTES: Record<DType, number> = { f32: 4, bf16: 2, f16: 2 };

/**
 * Bytes one backend may hold at once, over all its ranks, unless the caller says otherwise: a subject
 * that asks for a petabyte gets a clear error from its own op instead of taking the machine down.
 * The meta backend holds no storage and has no limit.
 */
export const DEFAULT_MAX_LIVE_BYTES = 16 * 1024 ** 3;

export interface BackendOptions {
  /** See DEFAULT_MAX_LIVE_BYTES. */
  maxLiveBytes?: number;
  /**
   * Open the store another thread offered under this ticket (`share()`) instead of a new one: the judge's
   * handle on a cell's tensors and ledgers (harness/judge).
   */
  sharedTicket?: string;
}

export class Backend {
  readonly kind: BackendKind;
  readonly ranks: number;
  private readonly store: InstanceType<ReturnType<typeof native>["NativeStore"]>;
  private readonly live = new Map<number, TensorHandle>();
  /** What the harness (not a subject) allocated, by id: a subject may not free or replace these. */
  private readonly harnessOwned = new Map<number, string>();
  /** Tensors another thread's handle of this store allocated, read here (`adopt`): never freed here. */
  private readonly adopted = new Map<number, TensorHandle>();
  private readonly stages: StageRecord[][];
  private readonly maxLiveBytes: number;
  private liveTotal = 0;
  /**
   * Results of verifyScaled by its arguments, valid until any tensor's contents change: every method
   * below that writes into a tensor or frees one calls `changed()` first, and a subject reaches the
   * store only through these methods. Checks verify the same (gradient, gen, block, coef) more than
   * once (parity.tensors, then scaling.nonempty): the second answer costs no regeneration.
   */
  private readonly verified = new Map<string, Mismatch | null>();

  constructor(kind: BackendKind, ranks: number, options: BackendOptions = {}) {
    this.maxLiveBytes = kind === "meta" ? Infinity : (options.maxLiveBytes ?? DEFAULT_MAX_LIVE_BYTES);
    if (kind === "cuda") {
      // Ranks map to devices as rank % device count (native/core/src/cuda, docs/cuda.md).
      const status = native().cudaStatus();
      if (!status.present) throw new ClipParityError("E_NO_CUDA", `backend cuda: ${status.message}`);
    }
    this.kind = kind;
    this.ranks = ranks;
    try {
      const { NativeStore } = native();
      this.store = options.sharedTicket !== undefined ? NativeStore.openShared(options.sharedTicket) : new NativeStore(kind, ranks);
    } catch (err) {
      if (kind !== "cuda") throw err;
      throw new ClipParityError("E_NO_CUDA", `backend cuda: ${(err as Error).message}`);
    }
    this.stages = Array.from({ length: ranks }, () => []);
  }

  get isMeta(): boolean {
    return this.kind === "meta";
  }

  /**
   * Offers this backend's store to another thread (the judge): the ticket opens it there once, as
   * `new Backend(kind, ranks, { sharedTicket })`.
   */
  share(): string {
    return this.store.share();
  }

  /** Takes back an offer `share()` made that no thread redeemed (the judge died first). */
  withdraw(ticket: string): void {
    native().NativeStore.withdraw(ticket);
  }

  /**
   * A handle on a tensor another thread's handle of this store allocated (the judge reading a cell's
   * gradients), after checking that the store holds it on `rank` with this dtype and shape. It is not
   * this handle's to free: freeAll leaves it to the thread that allocated it.
   */
  adopt(id: number, rank: number, dtype: DType, shape: readonly number[]): Tensor {
    const what = `tensor ${id} (expected on rank ${rank}, ${dtype} [${shape.join(", ")}])`;
    let held: { owner: number; dtype: string; shape: number[] };
    try {
      held = { owner: this.store.owner(id), dtype: this.store.dtype(id), shape: this.store.shape(id) };
    } catch (err) {
      throw new Error(`${what}: not in the store (${(err as Error).message})`);
    }
    if (held.owner !== rank || held.dtype !== dtype || held.shape.join() !== shape.join()) {
      throw new Error(`${what}: the store holds it on rank ${held.owner}, ${held.dtype} [${held.shape.join(", ")}]`);
    }
    const handle = new TensorHandle(id, dtype, shape, rank);
    this.adopted.set(id, handle);
    return handle;
  }

  /**
   * A new tensor charged to `rank`. `owner` names what the harness allocated it for (e.g. "the
   * gradient of layers.0.wq"): such a tensor cannot be freed through a subject's ops.
   */
  alloc(rank: number, dtype: DType, shape: readonly number[], owner?: string): Tensor {
    this.reserve(dtype, shape, `alloc on rank ${rank}`);
    const id = this.store.alloc(rank, dtype, [...shape]);
    return this.track(id, dtype, shape, rank, owner);
  }

  /**
   * New tensors of `rank`, each filled from the generator as `fillGrad` fills it: one native call
   * for the list, and no zeroing pass before the fill. All or nothing: on an error (the byte limit,
   * checked for the whole list first, or a native error naming `items[k]`) nothing stays allocated.
   */
  allocFillMany(rank: number, dtype: DType, items: readonly FillItem[]): Tensor[] {
    let pending = 0;
    for (const it of items) pending += this.reserve(dtype, it.shape, `alloc on rank ${rank}`, pending);
    const ids = this.store.allocFillMany(
      rank,
      dtype,
      items.map((it) => ({ shape: [...it.shape], gen: it.gen, block: it.block })),
    );
    return ids.map((id, k) => this.track(id, dtype, items[k].shape, rank, items[k].owner));
  }

  private track(id: number, dtype: DType, shape: readonly number[], rank: number, owner?: string): TensorHandle {
    const t = new TensorHandle(id, dtype, shape, rank);
    this.live.set(id, t);
    this.liveTotal += t.numel * DTYPE_BYTES[dtype];
    if (owner !== undefined) this.harnessOwned.set(id, owner);
    return t;
  }

  /**
   * Refuses, before the native store allocates, what would take the backend over its byte limit
   * (with `pending` bytes about to be allocated besides); returns the tensor's bytes.
   */
  private reserve(dtype: DType, shape: readonly number[], what: string, pending = 0): number {
    if (!DTYPE_BYTES[dtype]) throw new ClipParityError("E_TENSOR", `${what}: dtype ${JSON.stringify(dtype)} is not one of f32, bf16, f16`, 1);
    let n = 1;
    for (const d of shape) {
      if (!Number.isSafeInteger(d) || d < 0) throw new ClipParityError("E_TENSOR", `${what}: shape [${shape.join(", ")}] has a dim that is not a non-negative integer`, 1);
      n *= d;
    }
    const bytes = n * DTYPE_BYTES[dtype];
    const live = this.liveTotal + pending;
    if (live + bytes > this.maxLiveBytes) {
      throw new ClipParityError(
        "E_TENSOR",
        `${what}: ${dtype} [${shape.join(", ")}] needs ${bytes.toLocaleString("en-US")} bytes; with ` +
          `${live.toLocaleString("en-US")} live the backend would pass its limit of ${this.maxLiveBytes.toLocaleString("en-US")} bytes`,
        1,
      );
    }
    return bytes;
  }

  /** Forgets every kept verifyScaled result: a tensor is about to be written or freed. */
  private changed(): void {
    if (this.verified.size) this.verified.clear();
  }

  free(t: Tensor): void {
    this.changed();
    const handle = this.live.get(t?.id);
    if (!handle) throw new ClipParityError("E_TENSOR", `free: tensor ${t?.id} is not alive (freed already, or never allocated)`, 1);
    this.live.delete(handle.id);
    this.harnessOwned.delete(handle.id);
    this.liveTotal -= handle.numel * DTYPE_BYTES[handle.dtype];
    this.store.free(handle.id);
  }

  /** Frees every tensor still alive; returns how many there were. */
  freeAll(): number {
    this.changed();
    const n = this.live.size;
    for (const id of this.live.keys()) this.store.free(id);
    this.live.clear();
    this.harnessOwned.clear();
    this.liveTotal = 0;
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
    this.changed();
    this.store.fillGrad(t.id, gen, block);
  }
  fillValue(t: Tensor, value: number): void {
    this.changed();
    this.store.fillValue(t.id, value);
  }
  getElement(t: Tensor, index: number): number {
    return this.store.getElement(t.id, index);
  }
  setElement(t: Tensor, index: number, value: number): void {
    this.changed();
    this.store.setElement(t.id, index, value);
  }
  verifyScaled(t: Tensor, gen: GenSpec, block: Block, coef: number): Mismatch | null {
    const key = verifyKey(t.id, gen, block, coef);
    const kept = this.verified.get(key);
    if (kept !== undefined) return kept && { ...kept };
    const m = this.store.verifyScaled(t.id, gen, block, coef) ?? null;
    this.verified.set(key, m && { ...m });
    return m;
  }
  /**
   * `verifyScaled` of each item in list order, in one native call: the first mismatch (the item's
   * index and the Mismatch `verifyScaled` gives), or null when every item passes.
   */
  verifyScaledMany(items: readonly VerifyItem[]): { item: number; mismatch: Mismatch } | null {
    const keys = items.map((it) => verifyKey(it.tensor.id, it.gen, it.block, it.coef));
    // answered from kept results when they reach the first mismatch, or the end
    let k = 0;
    for (; k < keys.length; k++) {
      const kept = this.verified.get(keys[k]);
      if (kept === undefined) break;
      if (kept) return { item: k, mismatch: { ...kept } };
    }
    if (k === keys.length) return null;
    const found = this.store.verifyScaledMany(items.map((it) => ({ id: it.tensor.id, gen: it.gen, block: it.block, coef: it.coef }))) ?? null;
    const passed = found ? found.item : items.length;
    for (let j = 0; j < passed; j++) this.verified.set(keys[j], null);
    if (found) this.verified.set(keys[found.item], { ...found.mismatch });
    return found;
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
    this.changed();
    return this.store.loadSafetensors(path, rank).map((e) => ({
      name: e.name,
      tensor: this.track(e.id, this.store.dtype(e.id) as DType, this.store.shape(e.id), rank),
    }));
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
    this.changed();
    this.store.adamwStep(param.id, grad.id, expAvg.id, expAvgSq.id, step, hp);
  }
  /** dst = src (same dtype and element count), for the harness's own use (tensor collectives). */
  copyTensor(dst: Tensor, src: Tensor): void {
    this.changed();
    this.store.copyFrom(dst.id, src.id);
  }
  /** dst = round_dtype(float32 sum of srcs in list order), one rounding (same dtype and shape). */
  sumTensors(dst: Tensor, srcs: readonly Tensor[]): void {
    this.changed();
    this.store.sumTensors(
      dst.id,
      srcs.map((t) => t.id),
    );
  }
  /** Copies the intersection of two blocks of one global tensor from src into dst; returns elements copied. */
  copyBlock(dst: Tensor, dstBlock: Block, src: Tensor, srcBlock: Block): number {
    this.changed();
    return this.store.copyBlock(dst.id, dstBlock, src.id, srcBlock);
  }

  /**
   * The ops a subject on `rank` gets: every new tensor is charged to that rank; a tensor of another
   * rank, a freed one, or one the harness owns (a gradient) where the op would free it, is refused
   * with an error that names it, raised in the subject's own call.
   */
  opsFor(rank: number): Ops {
    const s = this.store;
    const own = (t: Tensor, what: string): number => {
      const handle = t === null || typeof t !== "object" ? undefined : this.live.get(t.id);
      if (!handle) throw new ClipParityError("E_TENSOR", `${what}: tensor ${t === null || typeof t !== "object" ? String(t) : t.id} is not alive (freed already, or not a tensor of this cell)`, 1);
      if (handle.rank !== rank) throw new ClipParityError("E_TENSOR", `${what}: tensor ${handle.id} is rank ${handle.rank}'s; rank ${rank} cannot use it`, 1);
      return handle.id;
    };
    const wrap = (id: number): Tensor => this.track(id, s.dtype(id) as DType, s.shape(id), rank);
    const sized = (dtype: DType, shape: readonly number[], what: string) => {
      this.reserve(dtype, shape, `${what} on rank ${rank}`);
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
      scale_: (t, coef) => {
        if (typeof coef !== "number") throw new ClipParityError("E_TENSOR", `scale_: the coefficient must be a number; got ${typeof coef}`, 1);
        this.changed();
        s.scale(own(t, "scale_"), coef);
      },
      empty: (dtype, shape) => this.alloc(rank, dtype, shape),
      clone: (t) => {
        const id = own(t, "clone");
        const h = this.live.get(id)!;
        sized(h.dtype, h.shape, "clone");
        return wrap(s.clone(id, rank));
      },
      narrow: (t, dim, start, length) => {
        const id = own(t, "narrow");
        const h = this.live.get(id)!;
        if (Number.isInteger(dim) && dim >= 0 && dim < h.shape.length && Number.isSafeInteger(length) && length >= 0) {
          sized(h.dtype, h.shape.map((d, i) => (i === dim ? length : d)), "narrow");
        }
        return wrap(s.narrow(id, dim, start, length, rank));
      },
      cat: (ts, dim) => {
        const ids = ts.map((t) => own(t, "cat"));
        const total = ids.reduce((n, id) => n + this.live.get(id)!.numel, 0);
        sized(this.live.get(ids[0]!)?.dtype ?? "f32", [total], "cat");
        return wrap(s.cat(ids, dim, rank));
      },
      copy_: (dst, src) => {
        this.changed();
        s.copyFrom(own(dst, "copy_"), own(src, "copy_"));
      },
      free: (t) => {
        const id = own(t, "free");
        const owner = this.harnessOwned.get(id);
        if (owner !== undefined) {
          throw new ClipParityError("E_TENSOR", `free: tensor ${id} is ${owner}, which the harness gave this subject; a subject frees only the tensors it allocates`, 1);
        }
        this.free(t);
      },
      exactZero: () => EXACT_ZERO,
      exactAdd,
      exactToNumber,
    };
  }

  /** A copy of any rank's tensor charged to `rank`, for the harness's own use (dumps, checks). */
  cloneFor(rank: number, t: Tensor): Tensor {
    const h = this.live.get(t.id) ?? this.adopted.get(t.id);
    if (!h) throw new ClipParityError("E_TENSOR", `clone: tensor ${t.id} is not alive`, 1);
    this.reserve(h.dtype, h.shape, `clone into rank ${rank}`);
    return this.track(this.store.clone(h.id, rank), h.dtype, h.shape, rank);
  }

  /** x = round(float32(x) * float32(coef)) in place, for the harness's own use. */
  scale(t: Tensor, coef: number): void {
    this.changed();
    this.store.scale(t.id, coef);
  }

  /** Concatenation on behalf of a collective: the result is charged to `rank`. */
  catFor(rank: number, ts: readonly Tensor[], dim: number): Tensor {
    this.reserve(ts[0].dtype, [ts.reduce((n, t) => n + t.numel, 0)], `all_gather into rank ${rank}`);
    const id = this.store.cat(
      ts.map((t) => t.id),
      dim,
      rank,
    );
    return this.track(id, ts[0].dtype, this.store.shape(id), rank);
  }
}

let untypedKeys = 0;

/** A number as text that tells -0 from 0 (String(-0) is "0"); NaN and the infinities as String does. */
function numKey(x: number | undefined): string {
  return Object.is(x, -0) ? "-0" : String(x);
}

/**
 * The arguments of verifyScaled as one string: equal strings, equal results (for unchanged contents).
 * Arguments of other types than the declared ones get a key of their own (never a kept result).
 */
function verifyKey(id: number, gen: GenSpec, block: Block, coef: number): string {
  const typed =
    typeof id === "number" &&
    typeof coef === "number" &&
    typeof gen?.seed === "bigint" &&
    typeof gen.step === "number" &&
    typeof gen.name === "string" &&
    typeof gen.exp === "number" &&
    (gen.specialIndex === undefined || typeof gen.specialIndex === "number") &&
    (gen.specialValue === undefined || typeof gen.specialValue === "number") &&
    (gen.sumOf === undefined || (Array.isArray(gen.sumOf) && gen.sumOf.every((n) => typeof n === "string"))) &&
    [block?.globalShape, block?.start, block?.len].every((a) => Array.isArray(a) && a.every((d) => typeof d === "number"));
  if (!typed) return `untyped|${++untypedKeys}`;
  return [
    id,
    numKey(coef),
    String(gen.seed),
    numKey(gen.step),
    JSON.stringify(gen.name),
    gen.dtype,
    numKey(gen.exp),
    gen.mode,
    numKey(gen.specialIndex),
    numKey(gen.specialValue),
    gen.sumOf === undefined ? "-" : JSON.stringify(gen.sumOf),
    block.globalShape.map(numKey).join(","),
    block.start.map(numKey).join(","),
    block.len.map(numKey).join(","),
  ].join("|");
}

export type { Exact };

/**
 * The SPMD world: one async instance of a function per rank, and collectives that rendezvous
 * across those instances like c10d process groups.
 *
 * Every member of a group must issue the group's collectives in the same order with the same
 * kind and reduction. A mismatch, or a rank that never arrives (it returned, threw, or waits on
 * another collective), is what a real NCCL job would hang on: here it is detected as soon as no
 * rank can make progress, and reported as a liveness failure naming the ranks, the group and the
 * call; a wall-clock limit catches subjects that wait on something else entirely.
 */
import { subjectRunning } from "../util/watch.ts";
import { hardenHandedOut } from "../util/harden.ts";
import type { CollectiveKind, CommRecord, Exact, ReduceOp, Tensor } from "../subject/api.ts";
import type { Group } from "../layout/mesh.ts";
import { DTYPE_BYTES, type Backend } from "../backend/backend.ts";
import { exactAdd } from "../backend/exact.ts";

export class LivenessError extends Error {
  readonly code = "E_LIVENESS";
  constructor(message: string) {
    super(message);
    this.name = "LivenessError";
  }
}

function emptyComm(): CommRecord {
  const k = () => ({ calls: 0, bytes: 0 });
  return { calls: 0, bytes: 0, byKind: { all_reduce: k(), all_gather: k(), broadcast: k(), barrier: k() }, byGroup: {} };
}

interface Arrival {
  rank: number;
  kind: CollectiveKind;
  /** What must agree across the group: kind, op, dtype, dim... */
  signature: string;
  payload: unknown;
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

interface Slot {
  group: Group;
  seq: number;
  arrivals: Map<number, Arrival>;
}

type RankState = { state: "running" } | { state: "blocked"; slot: Slot } | { state: "done"; threw: boolean };

export interface RankOutcome<T> {
  rank: number;
  value?: T;
  error?: Error;
}

export interface WorldResult<T> {
  ranks: RankOutcome<T>[];
  /** The first liveness failure, or null. */
  liveness: string | null;
  comm: CommRecord[];
  /** Per rank, the ranks whose data reached it through collectives (World.reach). */
  reach: number[][];
}

export interface WorldOptions {
  /** Wall-clock limit for the whole world, in ms. */
  timeoutMs?: number;
  backend?: Backend;
}

/** Bytes a number or an exact value occupies on the wire (a float64, or the accumulator's limbs). */
function payloadBytes(v: number | Exact): number {
  if (typeof v === "number") return 8;
  return 8 + Math.ceil(v.sum.toString(16).length / 2);
}

export class World {
  private readonly states: RankState[];
  private readonly seqs = new Map<string, number[]>();
  private readonly slots = new Map<string, Slot>();
  private failure: string | null = null;
  readonly comm: CommRecord[];
  /**
   * Per rank, the ranks whose data has reached it through completed collectives (itself first): a rank
   * can know of another's gradients only through them (comm.budget's lower bound, checks/reach.ts).
   */
  private readonly reached: Set<number>[];
  /** Wall time spent completing collectives (reductions, gathers), for the cell's profile. */
  collectiveMs = 0;
  /** The groups this world made (`own`), by key: a collective takes only these, never an object a subject built. */
  private readonly groups = new Map<string, Group>();

  constructor(
    readonly size: number,
    private readonly backend?: Backend,
  ) {
    this.states = Array.from({ length: size }, () => ({ state: "running" }) as RankState);
    this.comm = Array.from({ length: size }, emptyComm);
    this.reached = Array.from({ length: size }, (_, r) => new Set([r]));
  }

  /**
   * The world's own, frozen instance of a group (one per set of ranks): what the rank context hands a
   * subject, and the only kind of object its collectives accept.
   */
  own(group: Group): Group {
    let g = this.groups.get(group.key);
    if (!g) this.groups.set(group.key, (g = hardenHandedOut({ key: group.key, ranks: [...group.ranks] })));
    return g;
  }

  /** Per rank, the ranks whose data reached it through collectives, ascending. */
  get reach(): number[][] {
    return this.reached.map((s) => [...s].sort((a, b) => a - b));
  }

  get livenessFailure(): string | null {
    return this.failure;
  }

  allReduce(rank: number, group: Group, value: number | Exact, op: ReduceOp): Promise<number | Exact> {
    if (op !== "sum" && op !== "max") {
      return Promise.reject(new Error(`all_reduce: op ${JSON.stringify(op)} is not one of "sum", "max"`));
    }
    const exact = typeof value !== "number";
    if (exact && (value === null || typeof value !== "object" || typeof value.sum !== "bigint")) {
      return Promise.reject(new Error(`all_reduce: the value must be a number or an Exact ({ sum: bigint, nonfinite: number }); got ${String(value)}`));
    }
    if (exact && op !== "sum") return Promise.reject(new Error(`all_reduce of an exact value supports op "sum" only, got "${op}"`));
    return this.arrive(rank, group, "all_reduce", `all_reduce(${op}, ${exact ? "exact" : "float64"})`, value, payloadBytes(value), (arrivals) => {
      const vals = arrivals.map((a) => a.payload as number | Exact);
      let out: number | Exact;
      if (exact) out = (vals as Exact[]).reduce(exactAdd);
      else if (op === "max") out = (vals as number[]).reduce((a, b) => (Number.isNaN(a) || Number.isNaN(b) ? NaN : Math.max(a, b)));
      else out = (vals as number[]).reduce((a, b) => a + b); // group rank order: deterministic
      return arrivals.map(() => out);
    }) as Promise<number | Exact>;
  }

  allGather(rank: number, group: Group, t: Tensor, dim: number): Promise<Tensor> {
    const backend = this.backend;
    if (!backend) throw new Error("all_gather needs a backend");
    return this.arrive(rank, group, "all_gather", `all_gather(${t.dtype}, dim ${dim}, ${t.shape.length}-d)`, t, 0, (arrivals) => {
      const parts = arrivals.map((a) => a.payload as Tensor);
      return arrivals.map((a) => {
        const out = backend.catFor(a.rank, parts, dim);
        const bytes = (out.numel - (a.payload as Tensor).numel) * DTYPE_BYTES[t.dtype];
        const c = this.comm[a.rank];
        c.bytes += bytes;
        c.byKind.all_gather.bytes += bytes;
        c.byGroup[group.key].bytes += bytes;
        return out;
      });
    }) as Promise<Tensor>;
  }

  broadcast(rank: number, group: Group, value: number, srcRank: number): Promise<number> {
    return this.arrive(rank, group, "broadcast", `broadcast(src ${srcRank})`, value, 8, (arrivals) => {
      const src = arrivals.find((a) => a.rank === srcRank);
      if (!src) throw new LivenessError(`broadcast source rank ${srcRank} is not in group [${group.ranks.join(",")}]`);
      this.spread(arrivals.map((a) => a.rank), srcRank);
      return arrivals.map(() => src.payload);
    }) as Promise<number>;
  }

  /**
   * all_reduce(sum) of a tensor in place: each member's tensor becomes the float32 sum of every
   * member's, in group rank order, rounded once to the dtype (native sumTensors).
   */
  allReduceTensor(rank: number, group: Group, t: Tensor, op: "sum"): Promise<void> {
    const backend = this.backend;
    if (!backend) return Promise.reject(new Error("all_reduce of a tensor needs a backend"));
    if (op !== "sum") return Promise.reject(new Error(`all_reduce of a tensor: op ${JSON.stringify(op)} is not "sum"`));
    if (t === null || typeof t !== "object" || !Array.isArray(t.shape)) return Promise.reject(new Error(`all_reduce of a tensor: ${String(t)} is not a tensor`));
    const bytes = t.numel * DTYPE_BYTES[t.dtype];
    return this.arrive(rank, group, "all_reduce", `all_reduce(sum, tensor ${t.dtype} [${t.shape.join(", ")}])`, t, bytes, (arrivals) => {
      const ts = arrivals.map((a) => a.payload as Tensor);
      backend.sumTensors(ts[0]!, ts);
      for (const other of ts.slice(1)) backend.copyTensor(other, ts[0]!);
      return arrivals.map(() => undefined);
    }) as Promise<void>;
  }

  /** broadcast of a tensor in place: every member's tensor becomes a copy of `srcRank`'s. */
  broadcastTensor(rank: number, group: Group, t: Tensor, srcRank: number): Promise<void> {
    const backend = this.backend;
    if (!backend) return Promise.reject(new Error("broadcast of a tensor needs a backend"));
    if (t === null || typeof t !== "object" || !Array.isArray(t.shape)) return Promise.reject(new Error(`broadcast of a tensor: ${String(t)} is not a tensor`));
    const bytes = t.numel * DTYPE_BYTES[t.dtype];
    return this.arrive(rank, group, "broadcast", `broadcast(src ${srcRank}, tensor ${t.dtype} [${t.shape.join(", ")}])`, t, bytes, (arrivals) => {
      const src = arrivals.find((a) => a.rank === srcRank);
      if (!src) throw new LivenessError(`broadcast source rank ${srcRank} is not in group [${group.ranks.join(",")}]`);
      this.spread(arrivals.map((a) => a.rank), srcRank);
      for (const a of arrivals) if (a !== src) backend.copyTensor(a.payload as Tensor, src.payload as Tensor);
      return arrivals.map(() => undefined);
    }) as Promise<void>;
  }

  barrier(rank: number, group: Group): Promise<void> {
    return this.arrive(rank, group, "barrier", "barrier", null, 0, (arrivals) => arrivals.map(() => undefined)) as Promise<void>;
  }

  /** Runs `fn` on every rank concurrently and waits for all of them, or for a liveness failure. */
  async run<T>(fn: (rank: number) => Promise<T>, options: WorldOptions = {}): Promise<WorldResult<T>> {
    const timeoutMs = options.timeoutMs ?? 60_000;
    const outcomes: RankOutcome<T>[] = Array.from({ length: this.size }, (_, rank) => ({ rank }));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        if (!this.failure) this.fail(`timed out after ${timeoutMs} ms: ${this.describeWaiting()}`);
        resolve();
      }, timeoutMs);
    });
    subjectRunning(true);
    const all = Promise.all(
      outcomes.map(async (o) => {
        try {
          o.value = await fn(o.rank);
          this.states[o.rank] = { state: "done", threw: false };
        } catch (err) {
          o.error = err instanceof Error ? err : new Error(String(err));
          this.states[o.rank] = { state: "done", threw: true };
        }
        this.checkProgress();
      }),
    );
    await Promise.race([all, timeout]).finally(() => subjectRunning(false));
    clearTimeout(timer);
    return { ranks: outcomes, liveness: this.failure, comm: this.comm, reach: this.reach };
  }

  private arrive(
    rank: number,
    group: Group,
    kind: CollectiveKind,
    signature: string,
    payload: unknown,
    bytes: number,
    complete: (arrivals: Arrival[]) => unknown[],
  ): Promise<unknown> {
    if (this.failure) return Promise.reject(new LivenessError(this.failure));
    if (typeof group !== "object" || group === null || this.groups.get(group.key) !== group) {
      return Promise.reject(new Error(`rank ${rank} called ${kind} on a group the world did not make (${describeGroup(group)}): take groups from rank.group, rank.groupOf or rank.tieGroupOf`));
    }
    if (!group.ranks.includes(rank)) {
      return Promise.reject(new Error(`rank ${rank} called ${kind} on group [${group.ranks.join(",")}], which it is not a member of`));
    }
    const comm = this.comm[rank];
    comm.calls++;
    comm.bytes += bytes;
    comm.byKind[kind].calls++;
    comm.byKind[kind].bytes += bytes;
    const perGroup = (comm.byGroup[group.key] ??= { calls: 0, bytes: 0 });
    perGroup.calls++;
    perGroup.bytes += bytes;

    let seqs = this.seqs.get(group.key);
    if (!seqs) this.seqs.set(group.key, (seqs = new Array(this.size).fill(0)));
    const seq = seqs[rank]++;
    const slotKey = `${group.key}#${seq}`;
    let slot = this.slots.get(slotKey);
    if (!slot) this.slots.set(slotKey, (slot = { group, seq, arrivals: new Map() }));
    const promise = new Promise<unknown>((resolve, reject) => {
      slot.arrivals.set(rank, { rank, kind, signature, payload, resolve, reject });
    });
    this.states[rank] = { state: "blocked", slot };

    if (slot.arrivals.size === group.ranks.length) {
      this.slots.delete(slotKey);
      const arrivals = group.ranks.map((r) => slot.arrivals.get(r)!);
      const signatures = new Set(arrivals.map((a) => a.signature));
      if (signatures.size > 1) {
        const what = arrivals.map((a) => `rank ${a.rank} ${a.signature}`).join(", ");
        this.fail(`collective mismatch on group [${group.ranks.join(",")}] call #${seq}: ${what}`);
      } else {
        let results: unknown[];
        const t0 = performance.now();
        try {
          results = complete(arrivals);
        } catch (err) {
          this.fail((err as Error).message);
          return promise;
        } finally {
          this.collectiveMs += performance.now() - t0;
        }
        // a broadcast spreads its source's data only (its completion does that); a barrier carries none
        if (kind !== "broadcast" && kind !== "barrier") this.spread(arrivals.map((a) => a.rank), null);
        arrivals.forEach((a, i) => {
          this.states[a.rank] = { state: "running" };
          a.resolve(results[i]);
        });
      }
    } else {
      this.checkProgress();
    }
    return promise;
  }

  /** What a completed collective carried: every member's data to every member, or a broadcast's source's. */
  private spread(members: number[], source: number | null): void {
    const from = source === null ? members : [source];
    const union = new Set<number>();
    for (const r of from) for (const x of this.reached[r]!) union.add(x);
    for (const r of members) for (const x of union) this.reached[r]!.add(x);
  }

  /** No rank running and some rank blocked: nobody can ever complete that collective. */
  private checkProgress(): void {
    if (this.failure) return;
    if (this.states.some((s) => s.state === "running")) return;
    if (!this.states.some((s) => s.state === "blocked")) return;
    this.fail(`hang: ${this.describeWaiting()}`);
  }

  private describeWaiting(): string {
    const parts: string[] = [];
    for (const slot of this.slots.values()) {
      const arrived = [...slot.arrivals.values()];
      const missing = slot.group.ranks.filter((r) => !slot.arrivals.has(r));
      const missingWhy = missing.map((r) => {
        const s = this.states[r];
        if (s.state === "done") return `rank ${r} ${s.threw ? "raised" : "returned"} without calling it`;
        if (s.state === "blocked") {
          const a = s.slot.arrivals.get(r)!;
          return `rank ${r} is in ${a.signature} call #${s.slot.seq} on group [${s.slot.group.ranks.join(",")}]`;
        }
        return `rank ${r} never arrived`;
      });
      parts.push(
        `ranks ${arrived.map((a) => a.rank).join(",")} wait in ${arrived[0].signature} call #${slot.seq} on group ` +
          `[${slot.group.ranks.join(",")}]; ${missingWhy.join("; ")}`,
      );
    }
    return parts.join(" | ") || "no collective pending";
  }

  private fail(message: string): void {
    if (this.failure) return;
    this.failure = message;
    const err = new LivenessError(message);
    for (const slot of this.slots.values()) for (const a of slot.arrivals.values()) a.reject(err);
    this.slots.clear();
    // Ranks blocked in a mismatched slot that was already removed are rejected too.
    for (const s of this.states) if (s.state === "blocked") for (const a of s.slot.arrivals.values()) a.reject(err);
  }
}

/** A group argument as an error names it: its ranks when it has them, else what it was. */
function describeGroup(group: unknown): string {
  const ranks = (group as { ranks?: unknown } | null)?.ranks;
  return Array.isArray(ranks) ? `ranks [${ranks.join(",")}]` : group === null ? "null" : typeof group;
}

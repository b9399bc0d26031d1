/**
 * `clip-parity run --shard i/n`: the cells whose id hashes to shard i of n (1-based, as vitest's
 * `--shard`). The hash is SPEC §5's fnv1a64 of the cell id (its UTF-8 bytes), mod n: it depends on the
 * cell alone, never on the order or the rest of the matrix, so shards partition any set of cells exactly,
 * a --filter applies the same way on every shard, and a cell stays on its shard when others are added.
 */
import { InputError } from "../errors.ts";
import { cellId, type Cell } from "../cell/cell.ts";

export interface Shard {
  /** 1-based. */
  index: number;
  count: number;
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK64 = (1n << 64n) - 1n;

export function fnv1a64(text: string): bigint {
  let h = FNV_OFFSET;
  for (const b of new TextEncoder().encode(text)) h = ((h ^ BigInt(b)) * FNV_PRIME) & MASK64;
  return h;
}

export function parseShard(text: string, flag = "--shard"): Shard {
  const m = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(text);
  const bad = (why: string) => new InputError(`${flag}: "${text}" ${why}; expected i/n with 1 <= i <= n, e.g. 1/4`);
  if (!m) throw bad("is not of the form i/n");
  const index = Number(m[1]);
  const count = Number(m[2]);
  if (!Number.isSafeInteger(count) || count < 1) throw bad("has a shard count below 1");
  if (index < 1) throw bad("has a shard index below 1 (shards count from 1, as vitest's --shard)");
  if (index > count) throw bad(`has a shard index above the shard count ${count}`);
  return { index, count };
}

export function formatShard(s: Shard): string {
  return `${s.index}/${s.count}`;
}

/** The shard (1-based) a cell id falls in. */
export function shardOfId(id: string, count: number): number {
  return Number(fnv1a64(id) % BigInt(count)) + 1;
}

export function inShard(id: string, shard: Shard): boolean {
  return shard.count === 1 || shardOfId(id, shard.count) === shard.index;
}

/** The cells of one shard, in their original order; no shard = all of them. */
export function selectShard<T extends Cell>(cells: readonly T[], shard: Shard | string | undefined): T[] {
  if (shard === undefined) return [...cells];
  const s = typeof shard === "string" ? parseShard(shard) : shard;
  return cells.filter((c) => inShard(cellId(c), s));
}

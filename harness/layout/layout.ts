/**
 * Parallel layouts (SPEC §3): `{pp, dp_replicate, dp_shard, cp, tp, ep}`, all positive integers, in
 * torchtitan's short names. `world = pp * dp_replicate * dp_shard * cp * tp`; `ep` borrows ranks from
 * `dp_shard * cp * tp` and must divide it.
 */
import { didYouMean } from "../util/did-you-mean.ts";
import { LayoutError } from "../errors.ts";

export const LAYOUT_AXES = ["pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"] as const;
export type LayoutAxis = (typeof LAYOUT_AXES)[number];

export interface Layout {
  pp: number;
  dp_replicate: number;
  dp_shard: number;
  cp: number;
  tp: number;
  ep: number;
}

declare const validated: unique symbol;

/**
 * A layout that went through `validateLayout` (or `parseLayout`): frozen, only the six axes, every
 * rule of SPEC §3 checked once. Code that needs a valid layout takes this type instead of checking
 * again at every use; a plain `Layout` (e.g. read back from a result file) must be validated first.
 */
export type ValidLayout = Readonly<Layout> & { readonly [validated]: true };

/** The all-ones layout: one rank. */
export const SINGLE: ValidLayout = Object.freeze({ pp: 1, dp_replicate: 1, dp_shard: 1, cp: 1, tp: 1, ep: 1 }) as ValidLayout;

/** Number of ranks: pp * dp_replicate * dp_shard * cp * tp (ep reuses dp_shard * cp * tp ranks). */
export function worldSize(l: Layout): number {
  return l.pp * l.dp_replicate * l.dp_shard * l.cp * l.tp;
}

/** dp_shard * cp * tp: the ranks the sparse mesh splits into (efsdp, ep). */
export function innerSize(l: Layout): number {
  return l.dp_shard * l.cp * l.tp;
}

/**
 * Checks a layout and returns a normalized copy (only the six axes). Throws LayoutError whose message
 * names the numbers, as torchtitan's ParallelDims does:
 *  - `pp(0) must be a positive integer`
 *  - `ep(3) must divide dp_shard * cp * tp (4)`
 *  - `Invalid parallel dims: dp_replicate(2) * dp_shard(2) * cp(1) * tp(2) * pp(2) != world(8)` (only
 *    when `world` is given).
 */
export function validateLayout(l: Layout, world?: number): ValidLayout {
  if (l === null || typeof l !== "object") {
    throw new LayoutError(`A layout must be an object with axes ${LAYOUT_AXES.join(", ")}; got ${String(l)}`);
  }
  const out = {} as Layout;
  for (const axis of LAYOUT_AXES) {
    const v = (l as unknown as Record<string, unknown>)[axis];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) {
      throw new LayoutError(`${axis}(${String(v)}) must be a positive integer`);
    }
    out[axis] = v;
  }
  const inner = innerSize(out);
  if (inner % out.ep !== 0) {
    throw new LayoutError(`ep(${out.ep}) must divide dp_shard * cp * tp (${inner})`);
  }
  if (world !== undefined) {
    if (worldSize(out) !== world) {
      throw new LayoutError(
        `Invalid parallel dims: dp_replicate(${out.dp_replicate}) * dp_shard(${out.dp_shard}) * cp(${out.cp}) * ` +
          `tp(${out.tp}) * pp(${out.pp}) != world(${world})`,
      );
    }
  }
  return Object.freeze(out) as ValidLayout;
}

const TOKEN = /^([a-z_]+)\s*=?\s*(-?\d+)$/i;

/**
 * Parses the short form: comma-separated `<axis><size>` tokens, e.g. "pp2,dp_shard2,ep2" or
 * "tp8,dp_shard2" (any order; `axis=size` and spaces are accepted too). Axes left out are 1. "", "1" and
 * "single" are the all-ones layout. The result is validated (without a world size).
 */
export function parseLayout(spec: string): ValidLayout {
  if (typeof spec !== "string") throw new LayoutError(`A layout spec must be a string; got ${String(spec)}`);
  const s = spec.trim();
  const l: Layout = { ...SINGLE };
  if (s === "" || s === "1" || s.toLowerCase() === "single") return SINGLE;
  const seen = new Set<string>();
  for (const raw of s.split(",")) {
    const tok = raw.trim();
    const m = TOKEN.exec(tok);
    if (!m) {
      throw new LayoutError(
        `Bad layout token "${tok}" in "${spec}": expected <axis><size> such as "tp2", with axis one of ${LAYOUT_AXES.join(", ")}`,
      );
    }
    const axis = m[1]!.toLowerCase();
    if (!(LAYOUT_AXES as readonly string[]).includes(axis)) {
      throw new LayoutError(
        `Unknown layout axis "${m[1]}" in token "${tok}" of "${spec}": allowed axes are ${LAYOUT_AXES.join(", ")}${didYouMean(axis, LAYOUT_AXES)}`,
      );
    }
    if (seen.has(axis)) throw new LayoutError(`Layout axis "${axis}" given twice in "${spec}"`);
    seen.add(axis);
    l[axis as LayoutAxis] = Number(m[2]);
  }
  return validateLayout(l);
}

/** Canonical short form: axes in LAYOUT_AXES order, only those != 1; all ones -> "single". */
export function formatLayout(l: Layout): string {
  const parts = LAYOUT_AXES.filter((a) => l[a] !== 1).map((a) => `${a}${l[a]}`);
  return parts.length === 0 ? "single" : parts.join(",");
}

/** True when the two layouts have the same six sizes. */
export function sameLayout(a: Layout, b: Layout): boolean {
  return LAYOUT_AXES.every((x) => a[x] === b[x]);
}

/**
 * Hand-built check contexts for the tests that pin what a check says (its message, its verdict at a
 * boundary) where a cell would take seconds and show less: a check reads only a few of the context's
 * fields, and each test gives those.
 */
import type { CheckContext } from "../../harness/checks/types.ts";
import type { RankMemory } from "../../harness/results/types.ts";
import type { CommRecord } from "../../harness/subject/api.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { testCell } from "./subjects.ts";

/** A context with no values, no memory and no collectives: `over` gives what the check under test reads. */
export function ctxOf(over: Partial<Omit<CheckContext, "cell">> & { cell?: Partial<CheckContext["cell"]> } = {}): CheckContext {
  const { cell, ...rest } = over;
  return {
    cell: testCell(cell),
    backend: { isMeta: false } as CheckContext["backend"],
    subject: { name: "x", tolerance: "fp32", shape: "clip" },
    tolerance: "fp32",
    maxNorm: 1,
    errorIfNonfinite: false,
    reference: { powerSum: 1, totalNorm: 1, paramsWithGrad: 1, elementsWithGrad: 99 },
    clipCoef: 1,
    plan: [],
    grads: [],
    views: [],
    outcomes: [],
    liveness: null,
    memory: [],
    comm: [],
    reach: null,
    genSpec: () => {
      throw new Error("not in this test");
    },
    logicalSpec: () => {
      throw new Error("not in this test");
    },
    inputSpec: () => {
      throw new Error("not in this test");
    },
    repro: "",
    budgets: {},
    ...rest,
  } as CheckContext;
}

/** Norms by rank: outcomes of ranks that each returned the value given (an Error: raised it). */
export const outcomes = (...values: (number | Error | undefined | string)[]): CheckContext["outcomes"] =>
  values.map((v, rank) => (v instanceof Error ? { rank, error: v } : { rank, value: v as number }));

/** A rank's memory reading. */
export const memory = (rank: number, over: Partial<RankMemory> = {}): RankMemory =>
  ({ rank, gradBytes: 0, scratchPeakBytes: 0, budgetBytes: 1 << 20, leakedBytes: 0, ...over }) as RankMemory;

/** A rank's collectives: `calls` all_reduce calls (and any other kinds given). */
export function comm(calls: number, byKind: Partial<Record<keyof CommRecord["byKind"], number>> = {}): CommRecord {
  const kinds = { all_reduce: calls, ...byKind } as Record<string, number>;
  const total = Object.values(kinds).reduce((a, b) => a + b, 0);
  return {
    calls: total,
    bytes: 0,
    byKind: Object.fromEntries(["all_reduce", "all_gather", "broadcast", "barrier"].map((k) => [k, { calls: kinds[k] ?? 0, bytes: 0 }])) as CommRecord["byKind"],
    byGroup: {},
  };
}

export const layout = parseLayout;

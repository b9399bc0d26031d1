/**
 * Bitwise comparison of two training states of the same model, possibly in different layouts, held
 * in one backend: every physical copy of the resumed state (tied replicas included) against the
 * uninterrupted state's same physical copy (or its canonical copy when that layout has no such
 * replica), for the parameter, exp_avg, exp_avg_sq and the optimizer step count. Across layouts the
 * expected block is assembled from the uninterrupted shards in memory (native copyBlock), never
 * through the checkpoint loader under test.
 */
import type { Backend } from "../backend/backend.ts";
import { globalIndex } from "../checks/types.ts";
import { sameLayout } from "../layout/layout.ts";
import type { Tensor } from "../subject/api.ts";
import { ROLES, roleTensor, type CopyState, type TrainState } from "./train-state.ts";

export interface StateDiff {
  /** One line per difference found (at most `limit`). */
  differences: string[];
  /** How many (copy, role) tensors and step counts differ in all. */
  count: number;
  tensors: number;
  elements: number;
}

/** A float32 value with its bits, for messages: `1.5 (0x3fc00000)`. */
export const show = (x: number): string => {
  if (Number.isNaN(x)) return "NaN";
  const bits = new Uint32Array(new Float32Array([x]).buffer)[0]!;
  return `${x} (0x${bits.toString(16).padStart(8, "0")})`;
};

/** How a difference names the two states (default: a resumed run against the uninterrupted one). */
export interface StateWords {
  actual: string;
  expected: string;
}
const RESUME_WORDS: StateWords = { actual: "after resuming", expected: "uninterrupted run" };

export function compareStates(backend: Backend, expected: TrainState, actual: TrainState, limit = 8, words: StateWords = RESUME_WORDS): StateDiff {
  const out: StateDiff = { differences: [], count: 0, tensors: 0, elements: 0 };
  const note = (line: string) => {
    out.count++;
    if (out.differences.length < limit) out.differences.push(line);
  };
  const same = sameLayout(expected.layout, actual.layout);
  // uninterrupted copies by physical name, deduplicated by block
  const byFqn = new Map<string, CopyState[]>();
  const byName = new Map<string, CopyState[]>();
  for (const copies of expected.ranks) {
    for (const c of copies) {
      for (const [map, key] of [
        [byFqn, c.lp.fqn],
        [byName, c.lp.canonical ? c.lp.name : ""],
      ] as const) {
        if (!key) continue;
        const list = map.get(key) ?? map.set(key, []).get(key)!;
        if (!list.some((o) => o.lp.block.start.join() === c.lp.block.start.join() && o.lp.block.len.join() === c.lp.block.len.join())) list.push(c);
      }
    }
  }
  actual.ranks.forEach((copies, rank) => {
    copies.forEach((c, i) => {
      const { lp } = c;
      const sources = byFqn.get(lp.fqn) ?? byName.get(lp.name) ?? [];
      const twin = same ? expected.ranks[rank]![i] : undefined;
      if (same && twin?.lp.fqn !== lp.fqn) throw new Error(`internal: plans of the same layout differ at rank ${rank} copy ${i}`);
      const wantSteps = twin ? twin.steps : sources[0]?.steps;
      if (wantSteps !== c.steps) {
        note(`rank ${rank} ${lp.fqn}: optimizer step count ${c.steps} ${words.actual}; ${words.expected}: ${wantSteps}`);
      }
      for (const role of ROLES) {
        const got = roleTensor(c, role);
        let want: Tensor;
        let scratch: Tensor | null = null;
        if (twin) {
          want = roleTensor(twin, role);
        } else {
          scratch = backend.alloc(rank, "f32", lp.block.len);
          let n = 0;
          for (const src of sources) n += backend.copyBlock(scratch, lp.block, roleTensor(src, role), src.lp.block);
          if (n !== lp.numel) throw new Error(`internal: the uninterrupted run covers ${n} of ${lp.numel} elements of ${lp.fqn} on rank ${rank}`);
          want = scratch;
        }
        const m = backend.compare(want, got);
        if (scratch) backend.free(scratch);
        out.tensors++;
        out.elements += lp.numel;
        if (m) {
          note(
            `rank ${rank} ${lp.fqn} ${role}: element ${m.index} (global index ${globalIndex(lp.block, m.index)} of [${lp.block.globalShape.join(", ")}]) ` +
              `is ${show(m.actual)} ${words.actual}; ${words.expected}: ${show(m.expected)}`,
          );
        }
      }
    });
  });
  return out;
}

/** Every replica against its canonical copy (same block): the first difference, or null. */
export function compareTiedCopies(backend: Backend, s: TrainState): string | null {
  const canon = new Map<string, { rank: number; c: TrainState["ranks"][number][number] }>();
  s.ranks.forEach((copies, rank) => {
    for (const c of copies) if (c.lp.canonical && c.lp.tieGroup) canon.set(`${c.lp.name}@${c.lp.block.start}:${c.lp.block.len}`, { rank, c });
  });
  for (const [rank, copies] of s.ranks.entries()) {
    for (const c of copies) {
      if (c.lp.canonical) continue;
      const twin = canon.get(`${c.lp.name}@${c.lp.block.start}:${c.lp.block.len}`);
      if (!twin) continue; // a replica block that lines up with no canonical block: compared across layouts only
      if (twin.c.steps !== c.steps) {
        return `rank ${rank} replica ${c.lp.fqn}: optimizer step count ${c.steps}; canonical ${c.lp.name} on rank ${twin.rank}: ${twin.c.steps}`;
      }
      for (const role of ROLES) {
        const m = backend.compare(roleTensor(twin.c, role), roleTensor(c, role));
        if (m) {
          return (
            `rank ${rank} replica ${c.lp.fqn} ${role}: element ${m.index} (global index ${globalIndex(c.lp.block, m.index)} of [${c.lp.block.globalShape.join(", ")}]) ` +
            `is ${show(m.actual)}; canonical ${c.lp.name} on rank ${twin.rank}: ${show(m.expected)}`
          );
        }
      }
    }
  }
  return null;
}

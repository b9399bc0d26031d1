/**
 * What a performance note costs, measured: an exported script of a comm.budget cell run with REPRO_COST_PAIRS=N
 * times the framework's clip against the script's fused variant (one all_reduce over the local blocks' p-power sums,
 * repro_template.py fused_clip) in N pairs, order alternating, each call the slowest rank's. The page reports the
 * median saving per clip with its interquartile range, and "no measurable cost" where that range reaches 0.
 */
import { median, quantile } from "../util/stats.ts";

/** A performance note's measured cost: the clip against the script's fused variant in paired calls, seconds. */
export interface NoteCost {
  pairs: number;
  clipS: number;
  fusedS: number;
  /** The median of the pairs' savings (clip minus fused) and its interquartile range. */
  savedS: number;
  savedIqrS: [number, number];
  /** A saving outside noise: the savings' interquartile range lies above 0. */
  measurable: boolean;
}

/** How many paired timings a performance note's cost is measured from. */
export const COST_PAIRS = 11;

/** The cost summary of paired timings; the saving counts as measurable only where its interquartile range excludes 0 from below. */
export function noteCost(t: { clip: readonly number[]; fused: readonly number[] }): NoteCost {
  if (t.clip.length !== t.fused.length || t.clip.length < 5) throw new Error(`noteCost: ${t.clip.length} and ${t.fused.length} timings; at least 5 pairs are needed`);
  const saved = t.clip.map((c, i) => c - t.fused[i]!).sort((a, b) => a - b);
  const q1 = quantile(saved, 0.25);
  const us = (x: number) => Math.round(x * 1e7) / 1e7; // 0.1 us: the page prints microseconds
  return { pairs: saved.length, clipS: us(median(t.clip)), fusedS: us(median(t.fused)), savedS: us(quantile(saved, 0.5)), savedIqrS: [us(q1), us(quantile(saved, 0.75))], measurable: q1 > 0 };
}

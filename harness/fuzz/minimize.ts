/**
 * A second shrinking pass on the materialised case, after fast-check's own.
 *
 * fast-check shrinks the raw numbers an arbitrary drew; some simplifications cannot be reached that
 * way (its array shrinker drops leading elements, so a case that needs its first parameter but not
 * its last one keeps both; lowering pp remaps every stage). This pass tries, greedily and until no
 * step applies, every one-step simplification of the case itself and keeps it when the case still
 * fails: drop a parameter or a replica, lower an axis size of the layout, drop a tensor dim or lower
 * its size, turn a Shard into Replicate, drop a sub-mesh axis, move a copy to stage 0 or to the dense
 * mesh (one copy, or every copy of a tied parameter alike, which an optimizer-owned subject's cases
 * need), take a step off a training case, and reset seed, dtype, norm, regime and error_if_nonfinite
 * to the simplest values. `accept` refuses what the subject cannot run (case.ts checkOptimizerCase).
 */
import { LAYOUT_AXES, validateLayout, type Layout } from "../layout/layout.ts";
import { Replicate, Shard } from "../model/plan.ts";
import { caseSize, STAGE_MESH_AXES, validateCase, type FuzzCase, type FuzzCopy, type FuzzParam } from "./case.ts";


function divisors(n: number): number[] {
  const out: number[] = [];
  for (let d = 1; d <= n; d++) if (n % d === 0) out.push(d);
  return out;
}

function clone(c: FuzzCase): FuzzCase {
  return structuredClone(c);
}

/** Copies on stages >= pp move to stage % pp; a replica landing on a stage already held is dropped. */
function refitStages(c: FuzzCase): FuzzCase {
  const pp = c.layout.pp;
  for (const p of c.params) {
    p.stage %= pp;
    const held = new Set([p.stage]);
    p.replicas = p.replicas.filter((r) => {
      r.stage %= pp;
      if (held.has(r.stage)) return false;
      held.add(r.stage);
      return true;
    });
  }
  return c;
}

function* layoutSteps(c: FuzzCase): Generator<FuzzCase> {
  for (const axis of LAYOUT_AXES) {
    const size = c.layout[axis];
    if (size === 1) continue;
    for (const smaller of new Set([1, Math.floor(size / 2), size - 1])) {
      if (smaller < 1 || smaller >= size) continue;
      const layout: Layout = { ...c.layout, [axis]: smaller };
      const inner = layout.dp_shard * layout.cp * layout.tp;
      if (inner % layout.ep !== 0) {
        // keep ep as large as still divides: the sparse mesh changes least
        layout.ep = divisors(inner).filter((d) => d <= layout.ep).pop()!;
      }
      yield refitStages({ ...clone(c), layout: validateLayout(layout) });
    }
  }
}

function* copySteps(copy: FuzzCopy): Generator<(x: FuzzCopy) => void> {
  if (copy.stage !== 0) yield (x) => void (x.stage = 0);
  if (copy.mesh === "sparse") {
    yield (x) => {
      x.mesh = "dense";
      x.axes = STAGE_MESH_AXES.dense.slice();
      x.placements = x.axes.map(() => Replicate);
    };
  }
  for (let i = 0; i < copy.placements.length; i++) {
    const pl = copy.placements[i]!;
    if (pl.kind === "shard") {
      yield (x) => void (x.placements[i] = Replicate);
      if (pl.dim > 0) yield (x) => void (x.placements[i] = Shard(0));
    }
    if (pl.kind === "partial") yield (x) => void (x.placements[i] = Replicate);
  }
  if (copy.axes.length > 1) {
    for (let i = 0; i < copy.axes.length; i++) {
      yield (x) => {
        x.axes.splice(i, 1);
        x.placements.splice(i, 1);
      };
    }
  }
}

function* paramSteps(c: FuzzCase): Generator<FuzzCase> {
  // drop whole parameters, last first (fast-check already tried dropping leading ones)
  if (c.params.length > 1) {
    for (let i = c.params.length - 1; i >= 0; i--) {
      const n = clone(c);
      n.params.splice(i, 1);
      yield n;
    }
  }
  for (let i = 0; i < c.params.length; i++) {
    const p = c.params[i]!;
    for (let j = p.replicas.length - 1; j >= 0; j--) {
      const n = clone(c);
      n.params[i]!.replicas.splice(j, 1);
      yield n;
    }
    // tensor dims: drop one (placements on it become Replicate, later dims shift), or shrink it
    for (let d = 0; d < p.shape.length; d++) {
      if (p.shape.length > 1) {
        const n = clone(c);
        const q = n.params[i]!;
        q.shape.splice(d, 1);
        for (const copy of [q as FuzzCopy, ...q.replicas]) {
          copy.placements = copy.placements.map((pl) =>
            pl.kind !== "shard" ? pl : pl.dim === d ? Replicate : pl.dim > d ? Shard(pl.dim - 1) : pl,
          );
        }
        yield n;
      }
      for (const smaller of new Set([1, Math.floor(p.shape[d]! / 2), p.shape[d]! - 1])) {
        if (smaller < 1 || smaller >= p.shape[d]!) continue;
        const n = clone(c);
        n.params[i]!.shape[d] = smaller;
        yield n;
      }
    }
    const copies: FuzzCopy[] = [p, ...p.replicas];
    for (let k = 0; k < copies.length; k++) {
      for (const step of copySteps(copies[k]!)) {
        const n = clone(c);
        const q: FuzzParam = n.params[i]!;
        step(k === 0 ? q : q.replicas[k - 1]!);
        yield n;
      }
    }
    // the same step on every copy, so that copies placed alike stay alike (stage moves would collide)
    if (p.replicas.length) {
      for (const step of copySteps({ ...p, stage: 0 })) {
        const n = clone(c);
        const q: FuzzParam = n.params[i]!;
        for (const copy of [q, ...q.replicas]) step(copy);
        yield n;
      }
    }
  }
}

function* scalarSteps(c: FuzzCase): Generator<FuzzCase> {
  if (c.steps !== undefined && c.steps > 1) yield { ...clone(c), steps: c.steps - 1 };
  if (c.seed !== 0) yield { ...clone(c), seed: 0 };
  if (c.dtype !== "f32") yield { ...clone(c), dtype: "f32" };
  if (c.normType !== 2) yield { ...clone(c), normType: 2 };
  if (c.regime !== "active") yield { ...clone(c), regime: "active" };
  if (c.errorIfNonfinite !== undefined) {
    const n = clone(c);
    delete n.errorIfNonfinite;
    yield n;
  }
}

/** Every one-step simplification of `c` that is still a valid case (and that `accept` does not throw on). */
export function* simplifications(c: FuzzCase, accept: (c: FuzzCase) => void = () => {}): Generator<FuzzCase> {
  for (const gen of [paramSteps, layoutSteps, scalarSteps]) {
    for (const n of gen(c)) {
      let valid: FuzzCase;
      try {
        valid = validateCase(n);
        accept(valid);
      } catch {
        // an invalid step (e.g. a replica that no longer has a stage of its own): skip it
        continue;
      }
      yield valid;
    }
  }
}

export interface MinimizeResult {
  fuzzCase: FuzzCase;
  /** Simplifications tried and kept. */
  tried: number;
  kept: number;
}

/**
 * Greedy one-step minimisation: `stillFails(case)` resolves true when the case still shows the
 * failure. Stops at a fixpoint or after `maxTries` attempts.
 */
export async function minimize(
  c: FuzzCase,
  stillFails: (c: FuzzCase) => Promise<boolean>,
  maxTries = 3000,
  accept?: (c: FuzzCase) => void,
): Promise<MinimizeResult> {
  let current = c;
  let tried = 0;
  let kept = 0;
  const seen = new Set<string>();
  for (let progress = true; progress && tried < maxTries; ) {
    progress = false;
    for (const next of simplifications(current, accept)) {
      const key = JSON.stringify(next);
      if (seen.has(key)) continue;
      seen.add(key);
      if (++tried > maxTries) break;
      if (await stillFails(next)) {
        current = next;
        kept++;
        progress = true;
        break; // restart from the simpler case
      }
    }
  }
  return { fuzzCase: current, tried, kept };
}

/** Whether `a` is at most as big as `b` in every measure (for asserting minimisation never grows a case). */
export function notLarger(a: FuzzCase, b: FuzzCase): boolean {
  const x = caseSize(a);
  const y = caseSize(b);
  return x.ranks <= y.ranks && x.params <= y.params && x.elements <= y.elements;
}

/**
 * Training states judged in the judge's realm (issue 41): train.parity's and resume.equal's comparisons
 * read the states' tensors from the native store the worker trained in, shared by ticket, so a subject
 * that rewrites the addon's prototypes or the comparison helpers in its own thread changes nothing they
 * see. The worker hands over ids, step counts and plans only (plain data); the judge adopts each id after
 * checking its rank, dtype and shape against the copy it is said to be.
 */
import type { Backend, BackendKind } from "../backend/backend.ts";
import type { LocalParam } from "../model/plan.ts";
import type { ValidLayout } from "../layout/layout.ts";
import { compareStates, compareTiedCopies, type StateDiff, type StateWords } from "./state-compare.ts";
import type { CopyState, TrainState } from "./train-state.ts";

/** A physical copy's optimizer state as ids in the store (parameters and state are float32). */
export interface SharedCopy {
  lp: LocalParam;
  param: number;
  expAvg: number;
  expAvgSq: number;
  steps: number;
}

export interface SharedState {
  layout: ValidLayout;
  world: number;
  plan: LocalParam[][];
  ranks: SharedCopy[][];
  step: number;
}

/** Which comparisons to make: tied copies within each listed state, and pairs of states. */
export interface StatesRequest {
  backend: BackendKind;
  /** The store's ranks (the widest layout's world). */
  ranks: number;
  states: SharedState[];
  tied: number[];
  pairs: { expected: number; actual: number; limit: number; words?: StateWords }[];
}

export interface StatesVerdict {
  /** Per `tied` entry: the first difference between a replica and its canonical copy, or null. */
  tied: (string | null)[];
  /** Per `pairs` entry. */
  pairs: StateDiff[];
}

/** What the worker sends for a state: the ids of its tensors, nothing a subject could have handed it. */
export function sharedState(s: TrainState): SharedState {
  return {
    layout: s.layout,
    world: s.world,
    plan: s.plan,
    ranks: s.ranks.map((copies) => copies.map((c) => ({ lp: c.lp, param: c.param.id, expAvg: c.expAvg.id, expAvgSq: c.expAvgSq.id, steps: c.steps }))),
    step: s.step,
  };
}

/** The state again on the judge's side, each tensor adopted from the shared store after its checks. */
function adoptState(backend: Backend, s: SharedState): TrainState {
  const ranks: CopyState[][] = s.ranks.map((copies, rank) =>
    copies.map((c) => ({
      lp: c.lp,
      param: backend.adopt(c.param, rank, "f32", c.lp.block.len),
      expAvg: backend.adopt(c.expAvg, rank, "f32", c.lp.block.len),
      expAvgSq: backend.adopt(c.expAvgSq, rank, "f32", c.lp.block.len),
      grad: null,
      steps: c.steps,
    })),
  );
  return { layout: s.layout, world: s.world, plan: s.plan, ranks, step: s.step, norms: new Map() };
}

export function judgeStates(req: StatesRequest, backend: Backend): StatesVerdict {
  const states = req.states.map((s) => adoptState(backend, s));
  const at = (i: number) => states[i] ?? fail(`no state ${i} of ${states.length}`);
  return {
    tied: req.tied.map((i) => compareTiedCopies(backend, at(i))),
    pairs: req.pairs.map((p) => compareStates(backend, at(p.expected), at(p.actual), p.limit, p.words)),
  };
}

function fail(what: string): never {
  throw new Error(`internal: the judge's states request: ${what}`);
}

/**
 * What each check says of itself, pinned: the coverage planner reads `canFail` to require a case on
 * which each check can fail (a wrong rule either hides a check's blind spot or refuses a good matrix),
 * and `clip-parity list checks` prints `description`. Each rule is probed at its boundary.
 */
import { describe, expect, it } from "vitest";
import { CHECKS, RUN_CHECKS, type CanFailFacts } from "../../harness/checks/index.ts";

/** A cell where every check can fail: two ranks, a gradient, a finite norm to clip, a tied replica. */
const ANY: CanFailFacts = { world: 2, paramsWithGrad: 1, referenceFinite: true, clipCoef: 0.5, errorIfNonfinite: false, tiedReplica: true };
const NONFINITE: Partial<CanFailFacts> = { referenceFinite: false, errorIfNonfinite: true };
const SCALED_ONLY = [{ clipCoef: 1 }, { referenceFinite: false }, { paramsWithGrad: 0 }];

/** Per check: facts it can fail on, and facts (each one change away) it cannot. */
const RULES: Record<string, { can: Partial<CanFailFacts>[]; cannot: Partial<CanFailFacts>[] }> = {
  "parity.norm": { can: [{}, { clipCoef: 1, world: 1 }], cannot: [{ referenceFinite: false }, { paramsWithGrad: 0 }] },
  "parity.tensors": { can: [{ clipCoef: 0.999 }], cannot: SCALED_ONLY },
  "parity.ranks": { can: [{}], cannot: [{ world: 1 }] },
  "scaling.nonempty": { can: [{ tiedReplica: false }], cannot: SCALED_ONLY },
  "scaling.replicas": { can: [{}], cannot: [...SCALED_ONLY, { tiedReplica: false }] },
  liveness: { can: [{ paramsWithGrad: 0 }], cannot: [{ world: 1 }] },
  "errors.nonfinite": { can: [NONFINITE], cannot: [{}, { ...NONFINITE, errorIfNonfinite: false }, { ...NONFINITE, referenceFinite: true }] },
  "errors.raised": { can: [{ world: 1, paramsWithGrad: 0 }, { referenceFinite: false }], cannot: [NONFINITE] },
  "memory.peak": { can: [{ world: 1 }], cannot: [{ paramsWithGrad: 0 }] },
  "memory.leak": { can: [{ world: 1 }], cannot: [{ paramsWithGrad: 0 }] },
  "comm.budget": { can: [{ paramsWithGrad: 0 }], cannot: [{ world: 1 }] },
  "comm.reach": { can: [{}], cannot: [{ world: 1 }, { paramsWithGrad: 0 }] },
  isolation: { can: [{ world: 1, paramsWithGrad: 0 }], cannot: [] },
  golden: { can: [{ world: 1, paramsWithGrad: 0 }], cannot: [] },
};

describe("each check's canFail, at its boundary", () => {
  for (const check of [...CHECKS, ...RUN_CHECKS]) {
    it(check.id, () => {
      const rule = RULES[check.id];
      expect(rule, `no rule here for ${check.id}`).toBeDefined();
      for (const f of rule!.can) expect(check.canFail({ ...ANY, ...f }), JSON.stringify(f)).toBe(true);
      for (const f of rule!.cannot) expect(check.canFail({ ...ANY, ...f }), JSON.stringify(f)).toBe(false);
    });
  }
});

describe("each check says what it catches", () => {
  it("a description of a few words, distinct from every other check's", () => {
    const all = [...CHECKS, ...RUN_CHECKS];
    for (const c of all) expect(c.description.split(" ").length, c.id).toBeGreaterThan(4);
    expect(new Set(all.map((c) => c.description)).size).toBe(all.length);
  });
});

/**
 * Issue 57: comm.reach as the world records it (World.reach, harness/world/world.ts `spread`), where another
 * check masks it or no test went:
 *
 * - a collective that failed (a mismatch, a completion that threw, one issued after the world failed) joins no
 *   ranks. A cell with such a collective always fails `liveness` too, so a world that let it join ranks passed
 *   every cell test anyway: here the world and comm.reach are judged alone (liveness out of the way), and a cell
 *   shows comm.reach failing beside liveness.
 * - reach over more than one level of groups: a collective carries everything its members have already heard
 *   from (A joins B on one group, then B joins C on another: C has A's data), and only that: the order matters
 *   (B joins C first, then A joins B: C has not heard from A).
 *
 * Kept weakenings (suites/weakenings): world-failed-collective-joins.patch fails "a mismatched collective joins
 * no ranks" and the cell test; world-reach-one-hop.patch fails "A joins B, then B joins C"; world-reach-unordered.patch
 * fails "B joins C, then A joins B".
 */
import { describe, expect, it } from "vitest";
import { LivenessError, World } from "../../harness/world/world.ts";
import { makeGroup } from "../../harness/layout/mesh.ts";
import commReach from "../../harness/checks/comm-reach.ts";
import type { CheckContext } from "../../harness/checks/types.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { ctxOf, outcomes } from "../checks-branches/context.ts";
import { testCell, testSubject } from "../checks-branches/subjects.ts";
import { normFromPowerSum } from "../../harness/subject/api.ts";

const judge = (ctx: CheckContext) => commReach.judge(ctx) as { status: string; message: string };

/** A copy of `name` holding `len` elements from `start` of a 1-d parameter of `n`, for comm.reach's plan. */
const copyOf = (name: string, n: number, start: number, len: number) =>
  ({ name, fqn: name, canonical: true, block: { globalShape: [n], start: [start], len: [len] }, numel: len }) as unknown as CheckContext["plan"][number][number];
const G = {} as never; // a gradient: present

/** Rank r of `world` holds the r-th of `world` equal shards of one parameter `w`, each with a gradient. */
function shardedPlan(world: number): Pick<CheckContext, "plan" | "grads"> {
  const plan = Array.from({ length: world }, (_, r) => [copyOf("w", 2 * world, 2 * r, 2)]);
  return { plan, grads: plan.map(() => [G]) };
}

describe("a failed collective joins no ranks (comm.reach, liveness out of the way)", () => {
  it("a mismatched collective joins no ranks", async () => {
    const w = new World(2);
    const g = w.own(makeGroup([0, 1]));
    const res = await w.run(async (r) => {
      // each rank gives up on the failed collective and answers from what it has: its own shard
      await w.allReduce(r, g, r, r === 0 ? "sum" : "max").catch((e: unknown) => {
        if (!(e instanceof LivenessError)) throw e;
      });
      return 1;
    });
    expect(res.liveness).toMatch(/^collective mismatch on group \[0,1\] call #0/);
    expect(res.reach).toEqual([[0], [1]]);
    // comm.reach alone: each rank returned a norm of a parameter it holds half of
    const v = judge(ctxOf({ ...shardedPlan(2), reach: res.reach, outcomes: outcomes(1, 1) }));
    expect(v.status).toBe("fail");
    expect(v.message).toMatch(/^rank 0 returned a norm \(1\), but the collectives it completed joined it only to ranks \[0\], which hold 2 of the 4 elements of w/);
  });

  it("a collective whose completion threw (a broadcast from a rank outside the group) joins no ranks", async () => {
    const w = new World(2);
    const g = w.own(makeGroup([0, 1]));
    const res = await w.run(async (r) => w.broadcast(r, g, r, 5).catch(() => 1));
    expect(res.liveness).toBe("broadcast source rank 5 is not in group [0,1]");
    expect(res.reach).toEqual([[0], [1]]);
  });

  it("a collective issued after the world failed joins no ranks, though all its members issue it", async () => {
    const w = new World(4);
    const a = w.own(makeGroup([0, 1]));
    const b = w.own(makeGroup([2, 3]));
    const res = await w.run(async (r) => {
      if (r < 2) await w.allReduce(r, a, 1, r === 0 ? "sum" : "max").catch(() => 0);
      else await w.allReduce(r, b, 1, "sum").catch(() => 0);
      return 1;
    });
    expect(res.liveness).toMatch(/^collective mismatch on group \[0,1\]/);
    expect(res.reach).toEqual([[0], [1], [2], [3]]);
  });

  it("a cell whose ranks answer after a mismatched all_reduce fails comm.reach as well as liveness", async () => {
    // bucketed's power sum over dp_shard, where rank 1 reduces with max and rank 0 with sum: the collective
    // fails; each rank catches the error and returns the norm of its own shards
    const subject = testSubject("answers-after-a-mismatch", async (rank, args) => {
      let local = 0;
      for (const p of args.logical) if (p.grad) local += rank.ops.sumAbsPow(p.grad, args.normType);
      try {
        await rank.allReduce(rank.group("dp_shard"), local, rank.rank === 0 ? "sum" : "max");
      } catch {
        // gives up on the collective
      }
      return Math.fround(normFromPowerSum(local, args.normType));
    });
    const r = await runCell(testCell({ layout: parseLayout("dp_shard2") }), { subject });
    const status = Object.fromEntries(r.checks.map((c) => [c.id, c.status]));
    expect(status.liveness).toBe("fail");
    expect(status["comm.reach"]).toBe("fail");
    expect(r.checks.find((c) => c.id === "comm.reach")!.message).toMatch(/^rank 0 returned a norm \(.*\), but the collectives it completed joined it only to ranks \[0\]/);
  });
});

describe("comm.reach over more than one level of groups", () => {
  /** Three ranks; rank 1 meets rank 0 on {0,1} and rank 2 on {1,2}, in the order given. */
  async function twoLevels(order: "01 then 12" | "12 then 01", kind: "all_reduce" | "broadcast from 1" = "all_reduce") {
    const w = new World(3);
    const g01 = w.own(makeGroup([0, 1]));
    const g12 = w.own(makeGroup([1, 2]));
    const meet = (r: number, g: typeof g01) => (kind === "all_reduce" ? w.allReduce(r, g, r, "sum") : w.broadcast(r, g, r, 1));
    const res = await w.run(async (r) => {
      if (r === 0) await meet(r, g01);
      if (r === 2) await meet(r, g12);
      if (r === 1) {
        for (const g of order === "01 then 12" ? [g01, g12] : [g12, g01]) await meet(r, g);
      }
      return 1;
    });
    expect(res.liveness).toBeNull();
    return res.reach;
  }

  it("A joins B, then B joins C: C has A's data (and A has not heard from C)", async () => {
    const reach = await twoLevels("01 then 12");
    expect(reach).toEqual([[0, 1], [0, 1, 2], [0, 1, 2]]);
    // comm.reach on a parameter sharded over the three ranks: rank 2 may return a norm, rank 0 may not
    const plan = shardedPlan(3);
    expect(judge(ctxOf({ ...plan, reach, outcomes: outcomes(undefined, undefined, 1) })).status).toBe("pass");
    expect(judge(ctxOf({ ...plan, reach, outcomes: outcomes(1, undefined, undefined) })).message).toMatch(/^rank 0 returned a norm \(1\), but the collectives it completed joined it only to ranks \[0,1\], which hold 4 of the 6/);
  });

  it("B joins C, then A joins B: C has not heard from A (the order matters)", async () => {
    const reach = await twoLevels("12 then 01");
    expect(reach).toEqual([[0, 1, 2], [0, 1, 2], [1, 2]]);
    const plan = shardedPlan(3);
    expect(judge(ctxOf({ ...plan, reach, outcomes: outcomes(1, undefined, undefined) })).status).toBe("pass");
    expect(judge(ctxOf({ ...plan, reach, outcomes: outcomes(undefined, undefined, 1) })).message).toMatch(/^rank 2 returned a norm \(1\), but the collectives it completed joined it only to ranks \[1,2\], which hold 4 of the 6/);
  });

  it("a broadcast carries its source's data only, through two levels too", async () => {
    // rank 1 broadcasts to 0, then to 2: 0 and 2 hear from 1 only, never from each other
    expect(await twoLevels("01 then 12", "broadcast from 1")).toEqual([[0, 1], [1], [1, 2]]);
  });
});

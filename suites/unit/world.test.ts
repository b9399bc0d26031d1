import { describe, expect, it } from "vitest";
import { World, LivenessError } from "../../harness/world/world.ts";
import { makeGroup } from "../../harness/layout/mesh.ts";
import { exactAdd, exactToNumber, scaledBigIntToNumber } from "../../harness/backend/exact.ts";

const all = (n: number) => makeGroup(Array.from({ length: n }, (_, i) => i));

describe("rendezvous collectives", () => {
  it("all_reduce sums in group rank order and maxes with NaN propagation", async () => {
    const w = new World(3);
    const res = await w.run(async (r) => {
      const s = await w.allReduce(r, w.own(all(3)), r + 0.5, "sum");
      const m = await w.allReduce(r, w.own(all(3)), r === 1 ? NaN : r, "max");
      return [s, m];
    });
    expect(res.liveness).toBeNull();
    for (const o of res.ranks) expect(o.value).toEqual([4.5, NaN]);
    expect(res.comm[0].calls).toBe(2);
    expect(res.comm[2].byGroup["0,1,2"]).toEqual({ calls: 2, bytes: 16 });
  });

  it("groups rendezvous independently", async () => {
    const w = new World(4);
    const res = await w.run(async (r) => {
      const g = makeGroup(r < 2 ? [0, 1] : [2, 3]);
      return w.allReduce(r, w.own(g), r, "sum");
    });
    expect(res.ranks.map((o) => o.value)).toEqual([1, 1, 5, 5]);
  });

  it("exact values add without rounding", async () => {
    const w = new World(2);
    const res = await w.run(async (r) => w.allReduce(r, w.own(all(2)), { sum: BigInt(r + 1) << 1074n, nonfinite: 0 }, "sum"));
    expect(exactToNumber(res.ranks[0].value as never)).toBe(3);
  });

  it("a rank that skips a collective is a liveness failure, not a hang", async () => {
    const w = new World(2);
    const started = Date.now();
    const res = await w.run(async (r) => {
      if (r === 0) await w.allReduce(r, w.own(all(2)), 1, "sum");
      return 0;
    });
    expect(Date.now() - started).toBeLessThan(1000);
    expect(res.liveness).toMatch(/hang: ranks 0 wait in all_reduce\(sum, float64\) call #0 on group \[0,1\]; rank 1 returned without calling it/);
    expect(res.ranks[0].error).toBeInstanceOf(LivenessError);
  });

  it("a mismatched collective (sum vs max) is reported with both ranks' calls", async () => {
    const w = new World(2);
    const res = await w.run(async (r) => w.allReduce(r, w.own(all(2)), 1, r === 0 ? "sum" : "max"));
    expect(res.liveness).toMatch(/collective mismatch on group \[0,1\] call #0: rank 0 all_reduce\(sum, float64\), rank 1 all_reduce\(max, float64\)/);
  });

  it("a rank waiting on another group while its peer waits on this one is a deadlock", async () => {
    const w = new World(2);
    const res = await w.run(async (r) => {
      if (r === 0) await w.allReduce(r, w.own(all(2)), 1, "sum");
      else await w.barrier(r, w.own(all(2)));
      return 0;
    });
    expect(res.liveness).toMatch(/mismatch/);
  });

  it("a subject stuck outside any collective hits the wall-clock limit", async () => {
    const w = new World(1);
    const res = await w.run(() => new Promise<number>(() => {}), { timeoutMs: 50 });
    expect(res.liveness).toMatch(/timed out after 50 ms/);
  });

  it("a rank outside the group is refused", async () => {
    const w = new World(3);
    const res = await w.run(async (r) => (r === 2 ? w.allReduce(r, w.own(makeGroup([0, 1])), 1, "sum") : 0));
    expect(res.ranks[2].error?.message).toMatch(/not a member/);
  });
});

describe("the world's own groups (issue 55)", () => {
  it("a collective refuses a group object the caller made, even one with the same ranks", async () => {
    const w = new World(2);
    w.own(all(2)); // the world has a group of these ranks: a look-alike object is still not it
    const res = await w.run(async (r) => w.allReduce(r, { key: "0,1", ranks: [0, 1] }, 1, "sum"));
    for (const o of res.ranks) expect(o.error?.message).toMatch(/called all_reduce on a group the world did not make \(ranks \[0,1\]\)/);
  });

  it("own() hands out one frozen instance per set of ranks", () => {
    const w = new World(4);
    const g = w.own(makeGroup([1, 0]));
    expect(w.own(makeGroup([0, 1]))).toBe(g);
    expect(Object.isFrozen(g) && Object.isFrozen(g.ranks)).toBe(true);
  });

  it("a barrier moves no data: comm.reach counts only what a collective carried", async () => {
    const w = new World(2);
    const res = await w.run(async (r) => {
      await w.barrier(r, w.own(all(2)));
      return 0;
    });
    expect(res.reach).toEqual([[0], [1]]);
    const summed = await new World(2).run(async function (this: void, r) {
      return 0 * r;
    });
    expect(summed.reach).toEqual([[0], [1]]);
    const w2 = new World(2);
    const reduced = await w2.run(async (r) => w2.allReduce(r, w2.own(all(2)), r, "sum"));
    expect(reduced.reach).toEqual([[0, 1], [0, 1]]);
  });
});

describe("exact accumulator rounding", () => {
  it("rounds once, ties to even", () => {
    // 2^53 + 1 is a tie between 2^53 and 2^53 + 2: even wins.
    expect(scaledBigIntToNumber((1n << 53n) + 1n, 0)).toBe(2 ** 53);
    expect(scaledBigIntToNumber((1n << 53n) + 3n, 0)).toBe(2 ** 53 + 4);
    // a sticky bit far below breaks the tie upwards
    expect(scaledBigIntToNumber(((1n << 53n) + 1n) * (1n << 80n) + 1n, 80)).toBe(2 ** 53 + 2);
  });
  it("scales by 2^-1074 and handles subnormals", () => {
    expect(exactToNumber({ sum: 1n, nonfinite: 0 })).toBe(5e-324);
    expect(exactToNumber({ sum: 3n << 1074n, nonfinite: 0 })).toBe(3);
    expect(exactToNumber({ sum: 0n, nonfinite: Infinity })).toBe(Infinity);
    expect(exactToNumber(exactAdd({ sum: 0n, nonfinite: Infinity }, { sum: 1n, nonfinite: NaN }))).toBeNaN();
  });
});

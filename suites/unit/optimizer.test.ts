/**
 * The optimizer-owned clipper's helpers (harness/subject/optimizer.ts) on a rank that holds copies of
 * several tie groups, which no built-in model has (one tie group, so at most one tied copy per rank):
 * every rank must issue the tie groups' collectives in one order, by logical name, whatever the order
 * of its parameters; untied parameters take no part.
 */
import { describe, expect, it } from "vitest";
import type { ParamView, RankContext } from "../../harness/subject/api.ts";
import { finalizeTied, syncTied } from "../../harness/subject/optimizer.ts";
import { makeGroup } from "../../harness/layout/mesh.ts";

function view(name: string, tied: boolean, withParam = true): ParamView {
  return { name, fqn: `${name}.copy`, tieGroup: tied ? name : undefined, grad: { name }, param: withParam ? { name } : undefined, block: { start: [0], len: [1] } } as unknown as ParamView;
}

function recordingRank(): { rank: RankContext; calls: string[] } {
  const calls: string[] = [];
  const rank = {
    tieGroupOf: (p: ParamView) => {
      if (!p.tieGroup) throw new Error(`tieGroupOf: ${p.fqn} is not a tied parameter`);
      return makeGroup([0, 2]);
    },
    allReduceTensor: async (g: { ranks: readonly number[] }, t: { name: string }, op: string) => void calls.push(`all_reduce(${op}) ${t.name} on [${g.ranks.join(",")}]`),
    broadcastTensor: async (g: { ranks: readonly number[] }, t: { name: string }, src: number) => void calls.push(`broadcast ${t.name} from ${src} on [${g.ranks.join(",")}]`),
  } as unknown as RankContext;
  return { rank, calls };
}

const params = [view("output.weight", true), view("layers.0.w", false), view("embed.weight", true), view("norm.weight", false)];

describe("optimizer.ts: tie-group collectives in one order on every rank", () => {
  it("finalizeTied all_reduces each tied copy's gradient on its tie group, by logical name", async () => {
    const { rank, calls } = recordingRank();
    await finalizeTied(rank, params);
    expect(calls).toEqual(["all_reduce(sum) embed.weight on [0,2]", "all_reduce(sum) output.weight on [0,2]"]);
    const reversed = recordingRank();
    await finalizeTied(reversed.rank, [...params].reverse());
    expect(reversed.calls).toEqual(calls);
  });

  it("syncTied broadcasts each tied copy from the canonical copy's stage (the group's first rank), by logical name", async () => {
    const { rank, calls } = recordingRank();
    await syncTied(rank, [...params].reverse());
    expect(calls).toEqual(["broadcast embed.weight from 0 on [0,2]", "broadcast output.weight from 0 on [0,2]"]);
  });

  it("syncTied refuses a copy without its parameter tensor, naming it", async () => {
    const { rank } = recordingRank();
    await expect(syncTied(rank, [view("embed.weight", true, false)])).rejects.toThrow("syncTied: embed.weight.copy has no parameter tensor");
  });
});

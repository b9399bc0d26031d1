/**
 * Vacuous passes (harness/external/vacuity.ts): a cell where a clip that does not do the work passes too
 * cannot show a framework's pass to mean anything; docs/frameworks.md does not count such passes.
 */
import { describe, expect, it } from "vitest";
import { vacuity } from "../../harness/external/vacuity.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import type { Case } from "../../harness/cell/cell.ts";

const at = (layout: string, regime: Case["regime"], normType = 2): Case => ({ layout: parseLayout(layout), model: "llama3-debug", dtype: "f32", normType, regime, seed: 0 });

describe("vacuity", () => {
  it("zero gradients: a clip that returns 0 and scales nothing passes", async () => {
    expect(await vacuity(at("dp_shard2", "zeros"))).toMatch(/returns 0 and scales nothing/);
  });

  it("one rank, or replicas only: a clip with no collective passes", async () => {
    expect(await vacuity(at("single", "active"))).toMatch(/issues no collective/);
    expect(await vacuity(at("dp_replicate2", "active"))).toMatch(/issues no collective/);
  });

  it("sharded gradients with a finite p: neither probe passes, so a pass there means something", async () => {
    expect(await vacuity(at("dp_shard2", "active"))).toBeNull();
    expect(await vacuity(at("pp2,tp2", "active", 1))).toBeNull();
  });
});

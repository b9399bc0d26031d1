/**
 * Issue 42: the known-bad subjects that model a bucketing framework's bug are `bucketed`'s clip
 * (harness/subject/builtin/bucketed-core.ts) with exactly one step replaced, the step their bug lives
 * in: a copy of the clip would drift from `bucketed` (seven copies did: they kept `localPartial` after
 * `bucketed` moved to `summedPartial`, and so differed from it in two ways, not one).
 */
import { describe, expect, it, vi } from "vitest";
import { parseLayout } from "../../harness/layout/layout.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import type { BucketedSteps } from "../../harness/subject/builtin/bucketed-core.ts";

const core = vi.hoisted(() => ({ changes: [] as string[][] }));
vi.mock("../../harness/subject/builtin/bucketed-core.ts", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../harness/subject/builtin/bucketed-core.ts")>();
  return {
    ...original,
    bucketedClip: (...a: Parameters<typeof original.bucketedClip>) => {
      core.changes.push(Object.keys(a[2] ?? {}).sort());
      return original.bucketedClip(...a);
    },
  };
});

/** Each subject on the core and the one step its bug replaces (none for `bucketed` itself). */
const STEP_OF: Record<string, (keyof BucketedSteps)[]> = {
  bucketed: [],
  "bf16-norm": ["round"],
  "inf-as-sum": ["op"],
  "no-pp-reduce": ["reduceOverPp"],
  "padding-counted": ["partial"],
  "replica-twice": ["counts"],
  "replica-unscaled": ["scale"],
  "tp-replicate-summed": ["reductionGroup"],
  unbucketed: ["bucketKey"],
};

describe("known-bad subjects of a bucketing framework: bucketed's clip with one step replaced", () => {
  for (const [name, steps] of Object.entries(STEP_OF)) {
    it(`${name} replaces ${steps.length ? steps.join(", ") : "nothing"}`, async () => {
      core.changes.length = 0;
      const cell = { subject: name, layout: parseLayout("pp2,dp_shard2"), model: "llama3-debug", dtype: "f32" as const, normType: 2, regime: "active" as const, seed: 0 };
      await runCell(cell, { subject: BUILTIN_SUBJECTS[name]! });
      expect(core.changes.length, "every rank's clip is the core's").toBe(4);
      for (const change of core.changes) expect(change).toEqual(steps);
    });
  }
});

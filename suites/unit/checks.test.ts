/**
 * parity.tensors and parity.ranks are not in any known-bad subject's catchBy, so they get their own
 * subjects with the bug: each check must fail on them.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CHECK_INFO, CHECKS, RUN_CHECKS } from "../../harness/checks/index.ts";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { defineSubject } from "../../harness/subject/api.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { type Cell } from "../../harness/cell/cell.ts";
import { parseLayout } from "../../harness/layout/layout.ts";

const bucketed = BUILTIN_SUBJECTS.bucketed;
const cell: Cell = { subject: "x", layout: parseLayout("dp_shard2"), model: "llama3-debug", dtype: "f32", normType: 2, regime: "active", seed: 0 };
const status = async (subject: typeof bucketed, id: string) =>
  (await runCell(cell, { subject })).checks.find((c) => c.id === id)!;

describe("checks fail on the bug they target", () => {
  it("parity.tensors: gradients scaled a second time", async () => {
    const twice = defineSubject({
      ...bucketed,
      name: "scales-twice",
      async clip(rank, args) {
        const norm = await bucketed.clip(rank, args);
        for (const p of args.params) if (p.grad) rank.ops.scale_(p.grad, 0.5);
        return norm;
      },
    });
    expect((await status(bucketed, "parity.tensors")).status).toBe("pass");
    const r = await status(twice, "parity.tensors");
    expect(r.status).toBe("fail");
    expect(r.message).toMatch(/rank 0, .*element \d+: got .* expected/);
  });

  it("parity.ranks: rank 1 reports a different norm", async () => {
    const skewed = defineSubject({
      ...bucketed,
      name: "skewed",
      async clip(rank, args) {
        const norm = await bucketed.clip(rank, args);
        return rank.rank === 1 ? Math.fround(norm * 1.5) : norm;
      },
    });
    const r = await status(skewed, "parity.ranks");
    expect(r.status).toBe("fail");
    expect(r.message).toMatch(/rank 1 returned .* but rank 0 returned/);
  });
});

describe("adding a check is its module and one line in harness/checks/index.ts", () => {
  it("every module of harness/checks/ that defines a check is listed, once, in CHECKS or RUN_CHECKS", () => {
    const dir = join(import.meta.dirname, "../../harness/checks");
    const defining = readdirSync(dir).filter((f) => f.endsWith(".ts") && /defineCheck\(\{|: CheckInfo = \{/.test(readFileSync(join(dir, f), "utf8")));
    const ids = [...defining].map((f) => /id: "([^"]+)"/.exec(readFileSync(join(dir, f), "utf8"))?.[1]);
    expect(ids.sort()).toEqual([...CHECKS, ...RUN_CHECKS].map((c) => c.id).sort());
    expect(CHECK_INFO.size).toBe(CHECKS.length + RUN_CHECKS.length);
  });
});

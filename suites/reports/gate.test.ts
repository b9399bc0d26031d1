/**
 * `clip-parity gate`: each kind of regression fails the gate (exit 1) with a message naming the cell,
 * the check or rank and by how much; a clean comparison passes with "no regression"; bad files exit 2.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseSlack } from "../../cli/gate.ts";
import { compareResults } from "../../harness/results/compare.ts";
import { cli, smallReport, synthCell, synthFile, tempDir } from "./fixtures.ts";
import type { CellJson, ResultFile } from "../../harness/results/schema.ts";

const A = "bucketed/dp_shard2/llama3-debug/f32/n2/active/s0";
const B = "titan/tp2/llama3-debug/f32/n2/active/s0";
const C = "hf-replicate/dp_shard2/llama3-debug/f32/n2/active/s0";

function baseline(): ResultFile {
  return synthFile([
    synthCell(A),
    synthCell(B),
    synthCell(C, { checks: [{ id: "memory.peak", status: "fail", message: "rank 0: scratch peak over budget" }, { id: "parity.norm", status: "pass", message: "" }] }),
  ]);
}

function edit(file: ResultFile, id: string, f: (c: CellJson) => CellJson): ResultFile {
  return synthFile(file.cells.map((c) => (c.id === id ? f(structuredClone(c)) : c)));
}

function files(dir: string, base: ResultFile, now: ResultFile): [string, string] {
  const b = join(dir, "baseline.json");
  const r = join(dir, "results.json");
  writeFileSync(b, JSON.stringify(base));
  writeFileSync(r, JSON.stringify(now));
  return [b, r];
}

async function gate(base: ResultFile, now: ResultFile, ...extra: string[]) {
  const [b, r] = files(tempDir(), base, now);
  return cli(["gate", "--baseline", b, "--results", r, ...extra]);
}

describe("gate", () => {
  it("passes a clean comparison with 'no regression' (exit 0)", async () => {
    const clean = synthFile([synthCell(A), synthCell(B)]);
    const r = await gate(clean, clean);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("## clip-parity gate: ✅ no regression");
    expect(r.stdout).toContain("2 cells of");
  });

  it("also passes a real run against itself, and one where a known failure persists", async () => {
    const real = await smallReport();
    const r = await gate(real, real);
    expect(r.code).toBe(0);
    expect(real.summary.failed).toBeGreaterThan(0);
  });

  it("says both: no regression, but cells failing in the results, is no green tick (issue 45)", async () => {
    // C fails in the baseline and in the results: no regression, but a failing cell
    const r = await gate(baseline(), baseline());
    expect(r.code).toBe(0); // the gate judges regressions: a failure the baseline shares is none
    expect(r.stdout).not.toContain("✅");
    expect(r.stdout).toContain("## clip-parity gate: ⚠️ no regression, but 1 cell failing in the results");
    // the same failure of a known-bad subject (the file's catchBy) is what it is for
    const knownBad = { ...baseline(), catchBy: { "hf-replicate": ["memory.peak"] } };
    const expected = await gate(knownBad, knownBad);
    expect(expected.stdout).toContain("## clip-parity gate: ✅ no regression; every cell of the results passes (known-bad subjects aside)");
  });

  it("fails on a new failure, naming the cell, the check and the message", async () => {
    const now = edit(baseline(), A, (c) => ({
      ...c,
      checks: c.checks.map((x) => (x.id === "parity.norm" ? { ...x, status: "fail", message: "rank 1: norm 3.6 != reference 3.5\n  reproduce: npx clip-parity cell ..." } : x)),
    }));
    const r = await gate(baseline(), now);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("## clip-parity gate: ❌ 1 regression");
    expect(r.stdout).toContain(`| new failure | \`${A}\` | parity.norm | was pass, now fails: rank 1: norm 3.6 != reference 3.5 |`);
  });

  it("fails on a check newly failing in a cell that already failed another check; not on the same failure", async () => {
    const same = await gate(baseline(), baseline());
    expect(same.code).toBe(0);
    const now = edit(baseline(), C, (c) => ({ ...c, checks: c.checks.map((x) => ({ ...x, status: "fail", message: x.message || "norm differs" })) }));
    const r = await gate(baseline(), now);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`| new failure | \`${C}\` | parity.norm | was pass, now fails: norm differs |`);
    expect(r.stdout).not.toContain("| memory.peak |");
  });

  it("fails on a cell that disappeared", async () => {
    const now = synthFile(baseline().cells.filter((c) => c.id !== B));
    const r = await gate(baseline(), now);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`| disappeared cell | \`${B}\` | - | in the baseline but missing from the results |`);
  });

  it("fails on a scratch peak above the baseline beyond the slack, and not within it", async () => {
    const grow = (bytes: number) => edit(baseline(), B, (c) => ({ ...c, memory: c.memory.map((m) => (m.rank === 1 ? { ...m, scratchPeakBytes: bytes } : m)) }));
    expect((await gate(baseline(), grow(1050))).code).toBe(0); // +5.0% with 5% slack
    const r = await gate(baseline(), grow(1200));
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`| scratch peak above baseline | \`${B}\` | rank 1 | scratch peak 1.17 KiB (1200 B) \\> baseline 1000 B (1000 B) + 5% slack (+20%) |`);
    expect((await gate(baseline(), grow(1200), "--memory-slack", "25%")).code).toBe(0);
    expect((await gate(baseline(), grow(1060), "--memory-slack", "0.05")).code).toBe(1);
  });

  it("fails on a collective count above the baseline", async () => {
    const now = edit(baseline(), A, (c) => ({ ...c, comm: c.comm.map((k) => ({ ...k, collectives: k.collectives + 1 })) }));
    const r = await gate(baseline(), now);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`| collectives above baseline | \`${A}\` | rank 0 | 3 collectives \\> baseline 2 (+1) |`);
    expect(r.stdout).toContain(`| collectives above baseline | \`${A}\` | rank 1 |`);
    expect(r.stdout).toContain("2 collectives above baselines");
    expect((await gate(baseline(), now, "--comm-slack", "50%")).code).toBe(0);
  });

  it("reports every regression at once and lists information that does not fail the gate", async () => {
    let now = synthFile(baseline().cells.filter((c) => c.id !== B));
    now = edit(now, C, (c) => ({ ...c, checks: c.checks.map((x) => ({ ...x, status: "pass" as const })) }));
    now = synthFile([...now.cells, synthCell("exact/tp2/llama3-debug/f32/n2/active/s0")]);
    now = edit(now, A, (c) => ({ ...c, memory: c.memory.map((m) => ({ ...m, scratchPeakBytes: 10 })) }));
    const v = compareResults(baseline(), now, { memorySlack: 0.05, commSlack: 0 });
    expect(v.regressions.map((x) => x.kind)).toEqual(["disappeared"]);
    expect(v.notes.join("\n")).toMatch(/1 cell not in the baseline[\s\S]*1 cell failing in the baseline now passes[\s\S]*2 rank scratch peaks below the baseline/);
  });

  it("refuses bad files with exit 2, naming the file and the problem", async () => {
    const dir = tempDir();
    const good = join(dir, "good.json");
    writeFileSync(good, JSON.stringify(baseline()));
    const missing = await cli(["gate", "--baseline", join(dir, "nope.json"), "--results", good]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`${join(dir, "nope.json")}: cannot read it (no such file)`);
    const notJson = join(dir, "bad.json");
    writeFileSync(notJson, "{ cells: ");
    const r1 = await cli(["gate", "--baseline", good, "--results", notJson]);
    expect(r1.code).toBe(2);
    expect(r1.stderr).toContain(`${notJson}: not valid JSON`);
    const wrong = join(dir, "wrong.json");
    const w = baseline();
    (w.cells[1] as Record<string, unknown>).checks = [{ id: "parity.norm", status: "exploded", message: "" }];
    delete (w as Record<string, unknown>).summary;
    writeFileSync(wrong, JSON.stringify(w));
    const r2 = await cli(["gate", "--baseline", good, "--results", wrong]);
    expect(r2.code).toBe(2);
    expect(r2.stderr).toContain(`${wrong} is not a clip-parity result file`);
    expect(r2.stderr).toContain("cells[1].checks[0].status");
    expect(r2.stderr).toContain("summary");
    const r3 = await cli(["gate", "--baseline", good]);
    expect(r3.code).toBe(2);
    expect(r3.stderr).toContain("gate: missing --results (required)");
    const r4 = await cli(["gate", "--baseline", good, "--results", good, "--memory-slack", "5"]);
    expect(r4.code).toBe(2);
    expect(r4.stderr).toContain('--memory-slack: "5" is ambiguous');
  });

  it("parses slack as a percentage or a fraction", () => {
    expect(parseSlack("5%", "--memory-slack")).toBeCloseTo(0.05);
    expect(parseSlack("0.5%", "--memory-slack")).toBeCloseTo(0.005);
    expect(parseSlack("0.1", "--memory-slack")).toBeCloseTo(0.1);
    expect(() => parseSlack("five", "--memory-slack")).toThrow(/not a percentage/);
  });
});

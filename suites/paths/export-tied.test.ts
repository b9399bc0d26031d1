/**
 * Issue 57: the minimised export of a pipelined model with tied weights (`clip-parity export`,
 * harness/external/torch/export.ts). A failure of the layout alone (here comm.budget) is exported as a script that
 * keeps a few parameters with random gradients; on pp2,dp_shard2,ep2 of deepseek-v3-debug, tok_embeddings.weight
 * (stage 0) is tied to mtp.0.embed_tokens.weight (the last stage), and the script must still build that replica on
 * the last stage, as a copy of the kept canonical parameter: its index (so the same random gradient), shape and tp
 * style, under its own FQN and not counted as canonical. The suites/torch tests run minimised scripts of unpipelined
 * cells only, and need torch; here the script's text is read without torch (the subject is built from torchtitan's
 * framework file, no Python probed): its own Python that picks each stage's copies (build()'s `mine` lines) runs in
 * python3 on its own constants.
 *
 * Kept weakening (suites/weakenings): export-minimal-ties-dropped.patch (a minimised script lists no ties) fails
 * "the last stage builds the tied replica of the kept canonical parameter".
 */
import { execFileSync } from "node:child_process";
import { beforeAll, describe, expect, it } from "vitest";
import { buildExport, type ExportData } from "../../harness/external/torch/export.ts";
import { parseTorchSpec, type TorchSubject } from "../../harness/external/torch/subject.ts";
import { getFramework } from "../../harness/external/torch/frameworks.ts";
import { torchOptionsFromEnv } from "../../harness/external/torch/options.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { getModel } from "../../harness/model/models.ts";
import type { CellResult } from "../../harness/results/types.ts";
import type { Cell } from "../../harness/cell/cell.ts";

const cell: Cell = { subject: "torch:torchtitan", layout: parseLayout("pp2,dp_shard2,ep2"), model: "deepseek-v3-debug", dtype: "f32", normType: 2, regime: "active", seed: 0 };

/** What clip-parity saw on the cell: comm.budget failed, nothing else (a failure of the layout alone). */
const seen = {
  cell,
  checks: [
    { id: "parity.norm", status: "pass", message: "" },
    { id: "comm.budget", status: "fail", message: "rank 0 issued 3 collectives (3 all_reduce) in one clip; budget 2" },
  ],
  ranks: [0, 1, 2, 3].map((rank) => ({ rank, norm: 1 })),
  referenceNorm: 1,
  liveness: null,
  repro: "npx clip-parity cell --subject torch:torchtitan",
} as unknown as CellResult;

/**
 * torchtitan as the export reads it (its framework file's convention and explanations), built without probing a
 * Python for torch, which the script's text does not need: loadTorchSubject would refuse on a machine without .venv/.
 */
function titanWithoutTorch(): TorchSubject {
  const framework = getFramework("torchtitan");
  return {
    name: "torch:torchtitan",
    description: framework.description,
    spec: parseTorchSpec("torch:torchtitan"),
    framework,
    convention: framework.convention,
    info: { python: "(not probed)", torch: "(not probed)" },
    options: torchOptionsFromEnv({}),
    release: null,
    lastRun: null,
  } as unknown as TorchSubject;
}

type Copy = [fqn: string, index: number, name: string, shape: number[], style: string, stage: number];

/** Each stage's copies as the script's build() picks them: its constants and its `mine` lines, run in python3. */
function copiesByStage(script: string): Record<string, Copy[]> {
  const lines = script.split("\n");
  const start = lines.findIndex((l) => l.startsWith("CELL_ID, TARGET, UNSUPPORTED = "));
  const end = lines.findIndex((l, i) => i > start && l === "]");
  const mine = lines.filter((l) => /^\s+mine \+?= /.test(l)).map((l) => l.trim());
  expect(start >= 0 && end > start && mine.length > 0, "the script's constants and build()'s copy selection").toBe(true);
  const program = [
    "import json, math",
    ...lines.slice(start, end + 1),
    "out = {}",
    'for stage in range(LAYOUT["pp"]):',
    ...mine.map((l) => `    ${l}`),
    "    out[stage] = mine",
    "print(json.dumps(out))",
  ].join("\n");
  return JSON.parse(execFileSync("python3", ["-c", program], { encoding: "utf8" })) as Record<string, Copy[]>;
}

describe("a minimised export of a pipelined model with tied weights", () => {
  let data: ExportData;
  beforeAll(() => {
    data = buildExport(cell, titanWithoutTorch(), seen);
  }, 120_000);

  it("is minimised: a few parameters, random gradients, the tie kept", () => {
    expect(data.minimised).toBe(true);
    expect(data.script).toMatch(/^TIES, LOGICAL = \[\("tok_embeddings\.weight", "mtp\.0\.embed_tokens\.weight"\)\], \[/m);
    // the replica's gradient is drawn from the canonical copy's index: the same values on both copies
    expect(data.script).toContain("g = torch.randn(math.prod(shape), generator=torch.Generator().manual_seed(i))");
    expect(data.script).toContain("p.clip_parity_canonical = fqn == name");
  });

  it("the last stage builds the tied replica of the kept canonical parameter; the first stage the canonical copy", () => {
    const model = getModel(cell.model);
    const tie = model.ties.find((t) => t.canonical === "tok_embeddings.weight")!;
    expect(tie.replicas.map((r) => r.fqn)).toEqual(["mtp.0.embed_tokens.weight"]);
    const canonical = model.params.find((p) => p.name === "tok_embeddings.weight")!;
    const byStage = copiesByStage(data.script);
    const first = byStage["0"]!;
    const last = byStage["1"]!;
    const want: Copy = [canonical.name, canonical.index, canonical.name, canonical.shape, canonical.tp, 0];
    expect(first.filter((c) => c[2] === canonical.name)).toEqual([want]);
    // the replica: its own FQN, everything else the canonical copy's (so its gradient is the canonical copy's too)
    expect(last.filter((c) => c[2] === canonical.name)).toEqual([["mtp.0.embed_tokens.weight", ...want.slice(1)]]);
    // every other copy on its own stage, once: no tied parameter other than the replica crosses a stage
    for (const [stage, copies] of Object.entries(byStage)) {
      for (const c of copies) if (c[0] === c[2]) expect(c[5], c[0]).toBe(Number(stage));
      expect(new Set(copies.map((c) => c[0])).size).toBe(copies.length);
    }
    expect(first.length + last.length).toBeLessThan(10); // of deepseek-v3-debug's 100 parameters
  });
});

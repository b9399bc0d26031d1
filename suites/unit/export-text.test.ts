/**
 * An exported reproducer is valid Python whatever the cell's messages hold (issue 21): a NUL, other
 * control characters, triple quotes or backslashes in what clip-parity saw end up as visible escapes in
 * the script's docstring, never as bytes that break the script.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { buildExport } from "../../harness/external/torch/export.ts";
import { loadTorchSubject, type TorchSubject } from "../../harness/external/torch/subject.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import type { CellResult } from "../../harness/results/types.ts";
import type { Cell } from "../../harness/cell/cell.ts";

const HOSTILE = 'rank 0 raised: boom\u0000 after a NUL, \u001b[2J an escape, """ quotes, a \\ backslash,\r a CR, \u0085 a C1';

describe("export: hostile text in the script", () => {
  it("is still valid Python, with the control characters shown as escapes", () => {
    const cell: Cell = { subject: "torch:torchtitan", layout: parseLayout("tp2"), model: "llama3-debug", dtype: "f32", normType: 2, regime: "active", seed: 0 };
    const seen = {
      cell,
      checks: [{ id: "parity.norm", status: "fail", message: HOSTILE }],
      ranks: [{ rank: 0, error: HOSTILE }],
      referenceNorm: 1,
      liveness: null,
      repro: "npx clip-parity cell --subject 'torch:torchtitan'",
    } as unknown as CellResult;
    const { script } = buildExport(cell, loadTorchSubject("torch:torchtitan") as TorchSubject, seen);
    expect(script).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect(script).toContain("boom\\\\x00 after a NUL");
    const path = join(mkdtempSync(join(tmpdir(), "cp-export-")), "repro.py");
    writeFileSync(path, script);
    execFileSync("python3", ["-c", "import ast, sys; ast.parse(open(sys.argv[1], encoding='utf-8').read())", path]);
  });
});

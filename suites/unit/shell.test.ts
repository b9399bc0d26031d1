/**
 * The command lines the harness prints ("reproduce: ...") are shell-quoted (issue 21): pasted into bash
 * they give back the same argv, whatever a subject path or value holds.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { commandLine, shellQuote } from "../../harness/util/shell.ts";
import { reproCommand } from "../../harness/cell/cell.ts";
import { resumeRepro } from "../../harness/training/resume.ts";
import { trainRepro } from "../../harness/training/train-parity.ts";
import { parseLayout } from "../../harness/layout/layout.ts";

const HOSTILE = ["./my clip.ts", "it's", 'a"b', "$(touch /tmp/pwned)", "`id`", "a;b", "a|b", "new\nline", "nul\u0000?", "esc\u001b[2J", "tab\tx", "", "ünï", "back\\slash"];

/** The argv bash reads from `line` after the program words (NUL cannot reach argv: bash's $'\x00' ends the word there). */
function argvOf(line: string, skip: number): string[] {
  const out = execFileSync("bash", ["-c", `set -- ${line}; for a in "$@"; do printf '%s\\0' "$a"; done`], { encoding: "utf8" });
  return out.split("\u0000").slice(skip, -1);
}

describe("shellQuote", () => {
  it.each(HOSTILE.filter((a) => !a.includes("\u0000")))("round-trips %j through bash", (arg) => {
    expect(argvOf(commandLine("prog", [arg]), 1)).toEqual([arg]);
  });

  it("shows control characters as $'\\x..' escapes, never raw", () => {
    expect(shellQuote("esc\u001b[2J")).toBe("$'esc\\x1b[2J'");
    expect(shellQuote("nul\u0000?")).toBe("$'nul\\x00?'");
    expect(shellQuote("plain-path/x.ts")).toBe("plain-path/x.ts");
  });

  it("reproduce lines of cells, resume and train quote the subject", () => {
    const subject = "./my dir/$(rm -rf x)'s clip.ts";
    const cell = { subject, layout: parseLayout("tp2"), model: "llama3-debug", dtype: "f32" as const, normType: 2, regime: "active" as const, seed: 0 };
    expect(argvOf(reproCommand(cell, "cpu"), 3).slice(0, 2)).toEqual(["--subject", subject]);
    const resume = { ...cell, steps: 2, saveAt: 1 };
    expect(argvOf(resumeRepro(resume, "/tmp/a b"), 3)).toContain("/tmp/a b");
    expect(argvOf(resumeRepro(resume), 3).slice(0, 2)).toEqual(["--subject", subject]);
    const train = { ...cell, layouts: [parseLayout("pp2"), parseLayout("pp4")], steps: 1, init: "same" as const };
    expect(argvOf(trainRepro(train), 2).slice(0, 5)).toEqual(["--subject", subject, "--layouts", "pp2", "pp4"]);
  });
});

/**
 * The command-line contract other tools rely on: exit 0 / 1 / 2, messages that name the flag and the
 * value, the --json shape, user subjects by path, manifest totals, --dump files.
 */
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { native } from "../harness/backend/native.ts";
import { loadMatrixFile } from "../matrix/index.ts";
import { nearest } from "../harness/util/did-you-mean.ts";

const cli = (...args: string[]) => execa("node", ["bin/clip-parity.js", ...args], { reject: false, env: { CI: "" } });
const cell = ["cell", "--layout", "pp2,dp_shard2,ep2", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active"];

describe("clip-parity cell", () => {
  it("exits 0 when every check passes, and writes the --json shape", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-"));
    const r = await cli(...cell, "--subject", "bucketed", "--json", join(dir, "out.json"));
    expect(r.exitCode, r.stderr).toBe(0);
    const j = JSON.parse(readFileSync(join(dir, "out.json"), "utf8"));
    expect(j.summary).toEqual({ cells: 1, passed: 1, failed: 0, skipped: 0 });
    const c = j.cells[0];
    expect(Object.keys(c)).toEqual(expect.arrayContaining(["id", "subject", "layout", "model", "dtype", "normType", "regime", "seed", "maxNorm", "totalNorm", "referenceNorm", "clipCoef", "checks"]));
    expect(c.layout).toEqual({ pp: 2, dp_replicate: 1, dp_shard: 2, cp: 1, tp: 1, ep: 2 });
    expect(c.totalNorm).toBe(c.referenceNorm);
    expect(c.checks.map((x: { id: string }) => x.id)).toContain("parity.tensors");
  });

  it("exits 1 with the failing check, its numbers and a reproduction command", async () => {
    const r = await cli(...cell, "--subject", "no-pp-reduce");
    expect(r.exitCode).toBe(1);
    expect(r.stdout).toMatch(/fail parity\.norm: rank 0: total norm [\d.]+ != reference [\d.]+/);
    expect(r.stdout).toContain("reproduce: npx clip-parity cell --subject no-pp-reduce --layout pp2,dp_shard2,ep2");
  });

  it("runs a user's .ts subject by path, and catches a user's buggy .js subject", async () => {
    expect((await cli(...cell, "--subject", "./examples/my-clip.ts")).exitCode).toBe(0);
    const bad = await cli(...cell, "--subject", "./examples/forgets-pp.js");
    expect(bad.exitCode).toBe(1);
    expect(bad.stdout).toMatch(/fail parity\.norm/);
  });

  it.each([
    [["--layout", "pp2,dp_shard3,ep2"], /ep\(2\) must divide dp_shard \* cp \* tp \(3\)/],
    [["--layout", "pp2,xx2"], /Unknown layout axis "xx"/],
    [["--dtype", "f64"], /--dtype: "f64" is not one of f32, bf16, f16/],
    [["--norm", "0"], /--norm: "0" is not 2, 1, inf or a positive decimal number/],
    [["--regime", "warm"], /--regime: "warm" is not one of active/],
    [["--model", "gpt5"], /gpt5/],
    [["--subject", "nonesuch"], /nonesuch/],
    [["--subject", "./no/such/file.ts"], /no\/such\/file\.ts/],
    [["--seed", "x"], /--seed: "x" is not a decimal integer/],
  ])("exits 2 on bad input %j", async (override, message) => {
    const args = [...cell, "--subject", "bucketed"];
    for (let i = 0; i < override.length; i += 2) {
      const at = args.indexOf(override[i]);
      if (at < 0) args.push(override[i], override[i + 1]);
      else args[at + 1] = override[i + 1];
    }
    const r = await cli(...args);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
  });

  it("--dump writes the full gradients, the reference and the subject's result as safetensors", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-dump-"));
    const r = await cli("cell", "--subject", "bucketed", "--layout", "tp3", "--model", "llama3-debug", "--dtype", "bf16", "--norm", "2", "--regime", "sparse", "--dump", dir);
    expect(r.exitCode, r.stderr).toBe(0);
    for (const f of ["grads.safetensors", "reference.safetensors", "subject.safetensors", "cell.json"]) expect(existsSync(join(dir, f))).toBe(true);
    const n = native();
    const store = new n.NativeStore("cpu", 1);
    const grads = store.inspectSafetensors(join(dir, "grads.safetensors"));
    expect(grads.find((e) => e.name === "tok_embeddings.weight")).toEqual({ name: "tok_embeddings.weight", dtype: "bf16", shape: [2048, 256] });
    // sparse regime: manifest index 1 has no gradient, so it is absent from the dump
    const { getModel } = await import("../harness/model/models.ts");
    const params = getModel("llama3-debug").params;
    expect(grads.find((e) => e.name === params[1].name)).toBeUndefined();
    expect(grads.length).toBe(params.filter((p) => p.index % 3 !== 1).length);
    const ref = new Map(store.loadSafetensors(join(dir, "reference.safetensors"), 0).map((e) => [e.name, e.id]));
    const sub = store.loadSafetensors(join(dir, "subject.safetensors"), 0);
    expect(sub.length).toBe(ref.size);
    for (const e of sub) expect(store.compare(e.id, ref.get(e.name)!)).toBeNull();
  });
});

describe("failures on the terminal", () => {
  it("are grouped as the reports group them: subject x check, first message, one reproduce line; known-bad apart", async () => {
    const { printFailures } = await import("../cli/print.ts");
    const { synthCell } = await import("./reports/fixtures.ts");
    const fail = (subject: string, layout: string, check: string, n: number) =>
      synthCell(`${subject}/${layout}/llama3-debug/f32/n2/active/s0`, { checks: [{ id: check, status: "fail", message: `rank 1: norm ${n} != reference 3.5\n  reproduce: npx clip-parity cell ...` }] });
    const cells = [
      ...["tp2", "tp4", "pp2", "dp_shard2", "pp2,tp2"].map((l, i) => fail("mine", l, "parity.norm", i)),
      ...["tp2", "pp2"].map((l, i) => fail("no-pp-reduce", l, "parity.norm", i)),
    ];
    const lines: string[] = [];
    printFailures(cells, { write: (t: string) => (lines.push(t), true) } as never, { "no-pp-reduce": ["parity.norm"] });
    const text = lines.join("");
    expect(text.match(/^FAIL /gm)).toHaveLength(1);
    expect(text).toContain("FAIL mine x parity.norm: 5 cells\n     first: mine/tp2/llama3-debug/f32/n2/active/s0\n     rank 1: norm 0 != reference 3.5\n");
    expect(text.match(/reproduce: /g)).toHaveLength(1);
    expect(text).toContain("Known-bad subjects, failing as expected: 2 (cell, check) pairs in 1 groups\n  expected no-pp-reduce x parity.norm: 2 cells (expected: a check its catchBy names)\n");
    expect(text).not.toMatch(/FAIL no-pp-reduce/);
  });
});

describe("selecting cells: list cells, --filter RE, --exclude RE, --bail", () => {
  it("list cells prints the ids a run would run, filtered by regular expressions, the count on stderr", async () => {
    const r = await cli("list", "cells", "--matrix", "cpu", "--filter", "^titan-mtp/tp4/", "--exclude", "bf16|deepseek");
    expect(r.exitCode, r.stderr).toBe(0);
    const ids = r.stdout.trim().split("\n");
    expect(ids.length).toBeGreaterThan(1);
    for (const id of ids) expect(id).toMatch(/^titan-mtp\/tp4\/llama3-debug[a-z-]*\/(f32|f16)\//);
    expect(r.stderr).toContain(`${ids.length} cells of matrix cpu`);
    const bad = await cli("list", "cells", "--filter", "(");
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toMatch(/--filter: "\(" is not a regular expression/);
    const none = await cli("run", "--matrix", "cpu", "--filter", "^nothing-matches$");
    expect(none.exitCode).toBe(2);
    expect(none.stderr).toContain("no cell id matches /^nothing-matches$/");
  });

  it("--bail stops at the first unexpected failure", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-bail-"));
    const file = join(dir, "m.json");
    const layouts = ["pp2", "pp2,tp2", "pp2,dp_shard2", "pp4", "pp2,dp_replicate2", "pp4,tp2"];
    writeFileSync(file, JSON.stringify({ name: "bail", subjects: [join(process.cwd(), "examples/forgets-pp.js")], sweep: { layouts, models: ["llama3-debug"] } }));
    const r = await cli("run", "--matrix", file, "--bail", "--jobs", "1", "--quiet");
    expect(r.exitCode).toBe(1);
    expect(r.stdout).toMatch(/--bail: stopped at the first unexpected failure, after [12] cells/);
  }, 120_000);

  it("list columns are as wide as their longest entry", async () => {
    const { columns } = await import("../cli/list.ts");
    const text = columns([["a-very-long-subject-name-indeed-yes", "passes", "desc"], ["short", "caught by x", "desc"]]);
    const [a, b] = text.split("\n");
    expect(a!.indexOf("passes")).toBe(b!.indexOf("caught by"));
    expect(a!.indexOf("passes")).toBeGreaterThan("a-very-long-subject-name-indeed-yes".length);
  });
});

describe("user subjects", () => {
  it("are named by defineSubject's name in ids, results and JUnit classnames; the path stays for reproducing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-name-"));
    const file = join(dir, "m.json");
    writeFileSync(file, JSON.stringify({ name: "named", subjects: ["./examples/forgets-pp.js"], cases: [{ layout: "pp2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" }] }));
    const r = await cli("run", "--matrix", file, "--json", join(dir, "r.json"), "--report", "junit", "--out", join(dir, "out"), "--quiet");
    expect(r.exitCode, r.stderr).toBe(1);
    const c = JSON.parse(readFileSync(join(dir, "r.json"), "utf8")).cells[0];
    expect(c).toMatchObject({ id: "forgets-pp/pp2/llama3-debug/f32/n2/active/s0", subject: "forgets-pp", subjectPath: "./examples/forgets-pp.js" });
    expect(c.repro).toContain("--subject ./examples/forgets-pp.js");
    expect(r.stdout).toContain("FAIL forgets-pp x parity.norm");
    expect(readFileSync(join(dir, "out", "junit.xml"), "utf8")).toContain(`classname="forgets-pp"`);
  }, 120_000);

  it("are selected by either id: --filter and --exclude take the name the results print as well as the path", async () => {
    const one = "^my-clip/tp2/llama3-debug/f32/n2/active/s0$";
    const listed = await cli("list", "cells", "--matrix", "cpu", "--subject", "./examples/my-clip.ts", "--filter", one);
    expect(listed.exitCode, listed.stderr).toBe(0);
    expect(listed.stdout).toBe("./examples/my-clip.ts/tp2/llama3-debug/f32/n2/active/s0");
    const dir = mkdtempSync(join(tmpdir(), "cp-name-"));
    const r = await cli("run", "--matrix", "cpu", "--subject", "./examples/my-clip.ts", "--subject", "titan", "--filter", "tp2/llama3-debug/f32/n2/active/s0$", "--exclude", "^my-clip/", "--json", join(dir, "r.json"), "--quiet");
    expect(r.exitCode, r.stderr).toBe(0);
    const ids = (JSON.parse(readFileSync(join(dir, "r.json"), "utf8")).cells as { id: string }[]).map((c) => c.id);
    expect(ids.length).toBeGreaterThan(0);
    expect(ids.every((id) => id.startsWith("titan/")), ids.join(", ")).toBe(true);
    const byName = await cli("run", "--matrix", "cpu", "--subject", "./examples/my-clip.ts", "--filter", one, "--json", join(dir, "one.json"), "--quiet");
    expect(byName.exitCode, byName.stderr).toBe(0);
    expect((JSON.parse(readFileSync(join(dir, "one.json"), "utf8")).cells as { id: string }[]).map((c) => c.id)).toEqual(["my-clip/tp2/llama3-debug/f32/n2/active/s0"]);
  }, 120_000);
});

describe("progress", () => {
  it("estimates the time left from the cost of the cells done, not their count", async () => {
    const { CostEstimate, cellWeight } = await import("../cli/progress.ts");
    const { parseLayout } = await import("../harness/layout/layout.ts");
    const small = { layout: parseLayout("tp2"), model: "llama3-debug" };
    const big = { layout: parseLayout("pp2,dp_shard4,ep2"), model: "deepseek-v3-debug" };
    const e = new CostEstimate([small, small, small, big]);
    expect(e.secondsLeft(1)).toBeUndefined(); // nothing measured yet: no made-up figure
    [0, 1, 2].forEach((i) => e.cellDone(i));
    // 3 small cells took 3 s: the big one is worth cellWeight(big)/cellWeight(small) of them (a count would say 1 s)
    expect(e.secondsLeft(3)).toBeCloseTo(cellWeight(big) / cellWeight(small), 6);
    expect(e.secondsLeft(3)!).toBeGreaterThan(10);
  });

  it("covers the sections too: a line when one starts, its elapsed time while it runs, and when it ends", async () => {
    const { sectionProgress, runSection } = await import("../cli/section.ts");
    const lines: string[] = [];
    const stream = { isTTY: false, write: (t: string) => (lines.push(t), true) } as never;
    let clock = 0;
    let release!: () => void;
    const finished = new Promise<void>((r) => (release = r));
    const cases = [{ id: "a", expect: "pass" as const }];
    const quiet = { write: () => true } as never;
    const running = runSection(
      {
        kind: "regression",
        matrix: "cpu",
        cases,
        sections: ["cpu"],
        runAll: async () => (await finished, [{ result: { id: "a", durationMs: 1, check: { id: "x", status: "pass" as const, message: "" } }, fault: null }]),
        idOf: (c) => c.id,
        checkOf: (r) => r.check,
        out: quiet,
        progress: sectionProgress(stream, 20, () => clock),
      },
      undefined,
    );
    clock = 7000;
    await new Promise((r) => setTimeout(r, 60));
    clock = 9000;
    release();
    await running;
    expect(lines[0]).toBe("regression section (cpu): 1 cases running...\n");
    expect(lines).toContain("regression section (cpu): 1 cases running, 7s elapsed\n");
    expect(lines.at(-1)).toBe("regression section (cpu): 1 cases done in 9s\n");
  });

  it("where stderr is not a terminal: a line every 10 s of cells and at the end, not one per cell; says when torchrun starts; --quiet: none", async () => {
    const { progressHooks, PLAIN_EVERY_MS } = await import("../cli/progress.ts");
    const { parseLayout } = await import("../harness/layout/layout.ts");
    const lines: string[] = [];
    const stream = { isTTY: false, write: (t: string) => (lines.push(t), true) } as never;
    const cell = { subject: "torch:torchtitan", layout: parseLayout("tp2"), model: "llama3-debug" };
    let clock = 0;
    const hooks = progressHooks(stream, { cells: [cell, cell, cell], now: () => clock });
    hooks.onRunStart!({ matrix: "m", backend: "cpu", total: 3, cells: [cell, cell, cell] as never });
    hooks.onCellStart!(cell as never, 0, 3);
    expect(lines.join("")).toBe("running 3 cells of m on cpu...\nstarting torchrun for torch:torchtitan on 2 ranks (about 15-20 s of start-up)...\n");
    lines.length = 0;
    const passed = { id: "c", checks: [{ id: "x", status: "pass", message: "" }] } as never;
    clock = PLAIN_EVERY_MS / 10;
    hooks.onCellEnd!(passed, 0, 3, 1);
    expect(lines).toEqual([]); // a second in: not yet
    clock = PLAIN_EVERY_MS + 1;
    hooks.onCellEnd!(passed, 1, 3, 2);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^\[2\/3\] 0 failed {2}10s elapsed, ~5s left {2}c\n$/);
    clock += 1;
    hooks.onCellEnd!(passed, 2, 3, 3);
    expect(lines.at(-1)).toMatch(/^\[3\/3\] 0 failed/); // the end, however soon
    const args = ["run", "--matrix", "gpu4", "--backend", "cpu", "--filter", "^bucketed/tp4/llama3-debug/f32/n2/active/s0$"];
    const piped = await cli(...args);
    expect(piped.exitCode, piped.stderr).toBe(0);
    expect(piped.stderr).toMatch(/preparing the gpu4 matrix[\s\S]*\[1\/1\] 0 failed/);
    const quiet = await cli(...args, "--quiet");
    expect(quiet.stderr).not.toMatch(/preparing|\[1\/1\]/);
    // the verdict and the total time are the last line
    expect(piped.stdout.trimEnd().split("\n").at(-1)).toMatch(/^verdict: PASS: 1 cells \(1 passed, 0 failed, 0 skipped\); no golden compared; total \d+ s$/);
  }, 120_000);

  it("the last line is the verdict: cells, each section's cases as expected, the golden, the total time", async () => {
    const { finalLine, formatDuration } = await import("../cli/run.ts");
    const section = { kind: "regression" as const, matrix: "cpu", cases: [{ id: "a", expect: "pass" as const, check: "x", status: "pass" as const, message: "", met: true }, { id: "b", expect: "fail" as const, check: "x", status: "pass" as const, message: "", met: false }] };
    const line = finalLine("FAIL", { summary: { cells: 3, passed: 2, failed: 1, skipped: 0 }, notes: ["golden: 3 cells match golden/cpu.json"], stopped: false }, [section], 506.4);
    expect(line).toBe("verdict: FAIL: 3 cells (2 passed, 1 failed, 0 skipped); regression section (cpu) 1 of 2 as expected; golden: 3 cells match golden/cpu.json; total 8 min 26 s");
    expect(formatDuration(42.4)).toBe("42 s");
  });
});

describe("output paths", () => {
  const quick = ["cell", "--subject", "bucketed", "--layout", "tp2", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active"];

  it("--json - writes the result to stdout (the text for people to stderr) and no file named -", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-out-"));
    const r = await execa("node", [join(process.cwd(), "bin/clip-parity.js"), ...quick, "--json", "-"], { reject: false, cwd: dir, env: { CI: "" } });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).summary).toEqual({ cells: 1, passed: 1, failed: 0, skipped: 0 });
    expect(r.stderr).toContain("cells: 1 passed");
    expect(existsSync(join(dir, "-"))).toBe(false);
  });

  it("a symlink is kept and its target written; one to /dev/stdout writes to stdout in place", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-out-"));
    writeFileSync(join(dir, "target.json"), "old");
    symlinkSync("target.json", join(dir, "link.json"));
    const r = await cli(...quick, "--json", join(dir, "link.json"));
    expect(r.exitCode, r.stderr).toBe(0);
    expect(lstatSync(join(dir, "link.json")).isSymbolicLink()).toBe(true);
    expect(JSON.parse(readFileSync(join(dir, "target.json"), "utf8")).summary.cells).toBe(1);

    symlinkSync("/dev/stdout", join(dir, "stdout.json"));
    const s = await cli(...quick, "--json", join(dir, "stdout.json"));
    expect(s.exitCode, s.stderr).toBe(0);
    expect(lstatSync(join(dir, "stdout.json")).isSymbolicLink()).toBe(true); // not replaced by a regular file
    expect(s.stdout).toContain(`"summary": {\n    "cells": 1,`);
  });

  it("a regular file under /dev/shm (resume's scratch) is still replaced atomically", async () => {
    const { writeFileAtomic } = await import("../harness/util/fs.ts");
    const dir = mkdtempSync("/dev/shm/cp-out-");
    const file = join(dir, "index.json");
    writeFileSync(file, "old");
    const before = lstatSync(file).ino;
    writeFileAtomic(file, "new");
    expect(readFileSync(file, "utf8")).toBe("new");
    expect(lstatSync(file).ino).not.toBe(before); // a new file renamed over the old one, not the old one rewritten
    rmSync(dir, { recursive: true });
  });

  it("a FIFO is written in place, not renamed over", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-out-"));
    const fifo = join(dir, "pipe.json");
    await execa("mkfifo", [fifo]);
    const reader = execa("cat", [fifo], { timeout: 60_000, reject: false });
    const r = await cli(...quick, "--json", fifo);
    expect(r.exitCode, r.stderr).toBe(0);
    expect(lstatSync(fifo).isFIFO()).toBe(true);
    expect(JSON.parse((await reader).stdout).summary.cells).toBe(1);
  }, 90_000);
});

describe("clip-parity flags", () => {
  it("--version prints the package's version", async () => {
    const r = await cli("--version");
    expect(r.exitCode).toBe(0);
    expect(r.stdout.trim()).toBe(`clip-parity ${JSON.parse(readFileSync("package.json", "utf8")).version}`);
  });

  it("cell --help marks the cell's flags required (unless --file or --regression), and every missing one is reported at once", async () => {
    const help = await cli("cell", "--help");
    expect(help.stdout).toMatch(/^usage: clip-parity cell --subject NAME\|PATH --layout SPEC --model NAME --dtype \S+ --norm \S+ --regime NAME \[/);
    expect(help.stdout).toMatch(/--layout SPEC .*\(required unless --file or --regression\)/);
    const r = await cli("cell", "--subject", "bucketed", "--model", "llama3-debug");
    expect(r.exitCode).toBe(2);
    expect(r.stderr.split("\n")[0]).toBe("clip-parity: cell: missing --layout, --dtype, --norm, --regime (required unless --file or --regression is given)");
  });

  it("each default is written once: in the flag table, applied by the parser, never restated by the command", async () => {
    const { COMMANDS } = await import("../cli/main.ts");
    const { parseCommandLine } = await import("../cli/args.ts");
    const restated: string[] = [];
    for (const { spec } of COMMANDS) {
      const needed = Object.entries(spec.flags).flatMap(([name, f]) => (f.required || f.requiredUnless ? [`--${name}`, "x"] : []));
      const { values } = parseCommandLine(spec, needed);
      const file = ["merge", "report"].includes(spec.name) ? "merge" : spec.name;
      const source = readFileSync(`cli/${file}.ts`, "utf8");
      for (const [name, f] of Object.entries(spec.flags)) {
        if (f.default === undefined) continue;
        expect(values[name], `${spec.name} --${name}`).toBe(f.default);
        const quoted = name.replace(/[-]/g, "\\-");
        if (new RegExp(`\\((?:v, )?"${quoted}"\\)(?:\\s*\\?\\?|\\s*===\\s*undefined)`).test(source)) restated.push(`${spec.name} --${name}`);
      }
    }
    expect(restated).toEqual([]);
  });

  it("an unknown flag is one line, exit 2, naming the nearest flag", async () => {
    const r = await cli("run", "--matrx", "cpu");
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim()).toBe("clip-parity: run: unknown flag --matrx; did you mean --matrix? (clip-parity run --help lists the flags)");
    const far = await cli("list", "--zzzzzz");
    expect(far.exitCode).toBe(2);
    expect(far.stderr.trim()).toBe("clip-parity: list: unknown flag --zzzzzz (clip-parity list --help lists the flags)");
  });
});

describe("clip-parity manifest, list, run", () => {
  it.each([
    ["qwen3-0.6b", "596049920"],
    ["llama3-8b", "8030261248"],
    ["qwen3-30b-a3b", "30532122624"],
  ])("manifest %s totals %s", async (model, total) => {
    const r = await cli("manifest", "--model", model);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain(`(${total})`);
  });

  it("list names every check and subject", async () => {
    const r = await cli("list");
    for (const id of ["parity.norm", "memory.peak", "comm.budget", "hf-replicate", "ep-skip-empty", "gpu4"]) expect(r.stdout).toContain(id);
  });

  it("a cuda matrix on a machine without CUDA says so, and how to run it on the cpu backend", async () => {
    if (native().cudaStatus().present) return;
    const r = await cli("run", "--matrix", "gpu4");
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/matrix gpu4 needs CUDA.*--backend cpu/s);
  });

  it("a matrix file with a bad field is refused naming the file, the field and the value", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-m-"));
    const file = join(dir, "m.json");
    const { writeFileSync } = await import("node:fs");
    writeFileSync(file, JSON.stringify({ name: "mine", cases: [{ layout: "tp2", model: "llama3-debug", dtype: "f64", norm: 2, regime: "active" }] }));
    const r = await cli("run", "--matrix", file);
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toContain(`matrix file ${file} is not valid`);
    expect(r.stderr).toMatch(/cases\[0\]\.dtype/);
  });

  it("runs a user matrix file with a subject filter", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cp-m-"));
    const file = join(dir, "m.json");
    const { writeFileSync } = await import("node:fs");
    writeFileSync(file, JSON.stringify({ name: "mine", subjects: ["titan"], sweep: { layouts: ["tp2", "pp2"], models: ["llama3-debug"], norms: [2, "inf"] } }));
    const r = await cli("run", "--matrix", file, "--json", join(dir, "r.json"));
    expect(r.exitCode, r.stderr).toBe(0);
    expect(JSON.parse(readFileSync(join(dir, "r.json"), "utf8")).summary.cells).toBe(4);
  });
});

describe("names: normType in matrix files, and did you mean", () => {
  const write = (m: unknown) => {
    const file = join(mkdtempSync(join(tmpdir(), "cp-names-")), "m.json");
    writeFileSync(file, JSON.stringify(m));
    return file;
  };
  const base = { layout: "tp2", model: "llama3-debug", dtype: "f32", regime: "active" };
  const errorOf = (m: unknown) => {
    try {
      loadMatrixFile(write(m));
    } catch (err) {
      return (err as Error).message;
    }
    return "";
  };

  it("a case's norm type is normType, as the library and the results name it; norm (the CLI flag's name) is the same field, never both", () => {
    const byNormType = loadMatrixFile(write({ name: "m", cases: [{ ...base, normType: "inf" }], sweep: { layouts: ["tp2"], models: ["llama3-debug"], normTypes: [1] } }));
    const byNorm = loadMatrixFile(write({ name: "m", cases: [{ ...base, norm: "inf" }], sweep: { layouts: ["tp2"], models: ["llama3-debug"], norms: [1] } }));
    expect(byNormType.cases.map((c) => c.normType)).toEqual([Infinity, 1]);
    expect(byNorm.cases).toEqual(byNormType.cases);
    expect(errorOf({ name: "m", cases: [{ ...base, normType: 2, norm: 2 }] })).toContain("cases[0].norm: give normType or norm, not both");
    expect(errorOf({ name: "m", cases: [base] })).toContain('cases[0].normType: missing: a case needs its norm type (a positive number or "inf")');
    expect(errorOf({ name: "m", sweep: { layouts: ["tp2"], models: ["llama3-debug"], normTypes: [2], norms: [2] } })).toContain("sweep.norms: give normTypes or norms, not both");
  });

  it("a bad value names the field, the value, what is allowed and the nearest allowed name", () => {
    const e = errorOf({ name: "m", cases: [{ layout: "tpp2", model: "llama3-debg", dtype: "f64", normType: -1, regime: "activ" }] });
    expect(e).toContain('cases[0].layout: Unknown layout axis "tpp" in token "tpp2" of "tpp2": allowed axes are pp, dp_replicate, dp_shard, cp, tp, ep; did you mean "pp"?');
    expect(e).toMatch(/cases\[0\]\.model: "llama3-debg" is not a model: expected one of llama3-debug, .*; did you mean "llama3-debug"\?/);
    expect(e).toContain('cases[0].dtype: "f64" is not a dtype: expected one of f32, bf16, f16');
    expect(e).toContain('cases[0].normType: -1 is not a norm type: expected a positive number or "inf"');
    expect(e).toMatch(/cases\[0\]\.regime: "activ" is not a regime: expected one of active, .*; did you mean "active"\?/);
    expect(errorOf({ name: "m", cases: [{ ...base, normType: "two" }] })).toContain('cases[0].normType: "two" is not a norm type');
  });

  it("the command line suggests the nearest matrix, subject, layout axis, model and choice", async () => {
    expect((await cli("run", "--matrix", "cpuu")).stderr).toContain('--matrix: "cpuu" is neither a built-in matrix (cpu, gpu1, gpu4, gpu8, nightly) nor a .json file; did you mean "cpu"?');
    expect((await cli("run", "--matrix", "cpu", "--subject", "titn")).stderr).toMatch(/subject "titn" is not a built-in subject \(built in: .*\); did you mean "titan"\?/);
    const bad = (flag: string, value: string) => cli(...cell.map((a, i) => (cell[i - 1] === flag ? value : a)), "--subject", "titan");
    expect((await bad("--layout", "pp2,dp_shrd2,ep2")).stderr).toContain('did you mean "dp_shard"?');
    expect((await bad("--model", "deepseek-v3-debg")).stderr).toContain('did you mean "deepseek-v3-debug"?');
    expect((await bad("--regime", "sparce")).stderr).toContain('--regime: "sparce" is not one of');
    expect((await bad("--regime", "sparce")).stderr).toContain('did you mean "sparse"?');
  });

  it("nearest: a prefix, or at most 2 edits (1 for short names), case aside; nothing when nothing is near", () => {
    expect(nearest("deepseek", ["llama3-debug", "deepseek-v3-debug"])).toBe("deepseek-v3-debug");
    expect(nearest("tq", ["pp", "tp"])).toBe("tp"); // the nearest of two near ones
    expect(nearest("TITAN", ["titan"])).toBe("titan");
    expect(nearest("xyz", ["pp", "tp"])).toBeUndefined();
    expect(nearest("bukceted", ["bucketed", "reference"])).toBe("bucketed");
  });
});

describe("a regression cell alone: cell --regression N", () => {
  it("runs one cell of matrix/regressions.json as the section does, and is the reproduce line a failing case prints", async () => {
    const { loadRegressions, regressionRepro } = await import("../matrix/regressions.ts");
    const r0 = loadRegressions()[0]!;
    const line = regressionRepro(0, r0.catches.subject);
    expect(line).toBe(`npx clip-parity cell --regression 0 --subject ${r0.catches.subject}`);
    // the subject it was kept for fails it, by a check its entry names, and the reproduce line it prints is itself
    const bad = await cli("cell", "--regression", "0");
    expect(bad.exitCode, bad.stderr).toBe(1);
    expect(bad.stdout).toContain("(regression 0, matrix/regressions.json)");
    expect(bad.stdout).toMatch(new RegExp(`fail (${r0.catches.checks.join("|").replace(/\./g, "\\.")})`));
    expect(bad.stdout).toContain(`reproduce: ${line}`);
    const good = await cli("cell", "--regression", "0", "--subject", "titan");
    expect(good.exitCode, good.stdout + good.stderr).toBe(0);
    const outside = await cli("cell", "--regression", String(loadRegressions().length));
    expect(outside.exitCode).toBe(2);
    expect(outside.stderr).toContain(`--regression: ${loadRegressions().length} is outside 0..${loadRegressions().length - 1}`);
    const mixed = await cli("cell", "--regression", "0", "--layout", "tp2");
    expect(mixed.stderr).toContain("only --subject may be given with it (got --layout)");
  }, 120_000);
});

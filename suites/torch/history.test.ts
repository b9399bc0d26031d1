/**
 * Releases as an input (issue 53): pins and their errors, the environment cache (a failed build leaves nothing
 * behind, eviction takes the least recently used first and never one in use), history rows as data (a bad row is
 * refused naming its file and field), bisect's release range, and docs/history.md held to docs/history.json and to
 * the row files, so that a row edited without a rerun fails here.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { bisectReleases, releasesBetween } from "../../cli/bisect.ts";
import { applyWith } from "../../cli/args.ts";
import { compareVersions, environmentFor, environmentName, evict, normalizeInstall, parsePin, pipFailure, releaseEnvironment, specPins, withPins } from "../../harness/external/torch/environments.ts";
import { getFramework } from "../../harness/external/torch/frameworks.ts";
import { HISTORY_DIR, loadHistoryRow, loadHistoryRows, rerunLine, sideSubject } from "../../harness/external/torch/history.ts";
import { PROJECT_ROOT } from "../../harness/external/torch/options.ts";
import { parseTorchSpec } from "../../harness/external/torch/subject.ts";
import { headline, renderHistory, type HistoryData } from "../../scripts/docs/history-page.ts";
import { lastPatches, releaseVerdict, SMOKE_CELL, smokeCellOf } from "../../scripts/history.ts";
import { torchAvailability } from "./torch-available.ts";

const tmp = () => mkdtempSync(join(tmpdir(), "clip-parity-history-test-"));

describe("pins", () => {
  it("parses PKG==VER and normalizes the name as PyPI compares names", () => {
    expect(parsePin("DeepSpeed==0.19.6", "--with")).toEqual({ name: "deepspeed", version: "0.19.6" });
    expect(parsePin("fbgemm_gpu_cpu==1.3.0", "--with")).toEqual({ name: "fbgemm-gpu-cpu", version: "1.3.0" });
  });
  it.each(["deepspeed", "deepspeed>=0.19", "deepspeed==", "==1.0", "deepspeed==0.19.*"])("refuses %s naming the flag and the value", (text) => {
    expect(() => parsePin(text, "--with")).toThrow(new RegExp(`^--with: "${text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}" is not PKG==VERSION`));
  });
  it("a spec's pins follow @; --with adds to them and refuses a second version of one package", () => {
    expect(specPins("torch:deepspeed@deepspeed==0.19.6,torch==2.9.1")).toEqual({ head: "torch:deepspeed", pins: [{ name: "deepspeed", version: "0.19.6" }, { name: "torch", version: "2.9.1" }] });
    expect(withPins("torch:deepspeed", [parsePin("deepspeed==0.19.6", "x")])).toBe("torch:deepspeed@deepspeed==0.19.6");
    expect(withPins("bucketed", [parsePin("deepspeed==0.19.6", "x")])).toBe("bucketed");
    expect(() => withPins("torch:deepspeed@deepspeed==0.19.6", [parsePin("deepspeed==0.19.7", "x")])).toThrow(/deepspeed is pinned twice \(0\.19\.6 and 0\.19\.7\)/);
    expect(parseTorchSpec("torch:torch.nn.utils:clip_grad_norm_@torch==2.9.1")).toMatchObject({ kind: "function", module: "torch.nn.utils", pins: [{ name: "torch", version: "2.9.1" }] });
  });
  it("--with on a run without a torch: subject is refused, naming the subjects", () => {
    expect(() => applyWith(["bucketed", "titan"], [parsePin("deepspeed==0.19.6", "x")])).toThrow(/releases apply to torch: subjects, and the run has none \(subjects: bucketed, titan\)/);
    expect(applyWith(["bucketed", "torch:deepspeed"], [parsePin("deepspeed==0.19.6", "x")])).toEqual(["bucketed", "torch:deepspeed@deepspeed==0.19.6"]);
  });
  it("pip's failures read as one line naming the package and version", () => {
    expect(pipFailure("ERROR: Could not find a version that satisfies the requirement deepspeed==0.0.999 (from versions: 0.1)\nERROR: No matching distribution found for deepspeed==0.0.999\n")).toEqual({ line: "no release deepspeed==0.0.999 on the package registry", resolution: false });
    expect(pipFailure("ERROR: Cannot install torch==2.15.0 and torchrec==1.3.0 because these package versions have conflicting dependencies.\n\nThe conflict is caused by:\n    torchrec 1.3.0 depends on torch==2.8.0\n\n").resolution).toBe(true);
  });
});

describe("the environment cache", () => {
  it("evicts the least recently used environments past the cap, never one in use", () => {
    const dir = tmp();
    try {
      const env = (name: string, gb: number, usedAt: number) => {
        mkdirSync(join(dir, name, "bin"), { recursive: true });
        writeFileSync(join(dir, name, "bin", "python"), "");
        writeFileSync(join(dir, name, "clip-parity-env.json"), JSON.stringify({ format: 1, pins: [name], kind: "overlay", versions: {}, python: "3.11", buildSeconds: 1, bytes: gb * 1024 ** 3, builtAt: "" }));
        writeFileSync(join(dir, name, ".last-used"), "");
        utimesSync(join(dir, name, ".last-used"), usedAt, usedAt);
      };
      env("claimed", 6, 500);
      env("old", 6, 1000);
      env("middle", 6, 2000);
      env("new", 6, 3000);
      // a live process (this test's parent) uses the least recently used one: kept
      mkdirSync(join(dir, "claimed", ".users"));
      writeFileSync(join(dir, "claimed", ".users", String(process.ppid)), "");
      const removed = evict({ cacheDir: dir, capBytes: 13 * 1024 ** 3, log: () => {} });
      expect(removed.map((d) => d.split("/").pop())).toEqual(["old", "middle"]);
      expect(readdirSync(dir).sort()).toEqual(["claimed", "new"]);
      // a run done with an environment gives up its claim, so its own later builds can evict it
      mkdirSync(join(dir, "new", ".users"));
      writeFileSync(join(dir, "new", ".users", String(process.pid)), "");
      releaseEnvironment(join(dir, "new"));
      expect(readdirSync(join(dir, "new", ".users"))).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a framework's install needs are part of the cache key, in a canonical form; none keep the name they had", () => {
    const pins = [parsePin("torchrec==1.3.0", "x"), parsePin("torch==2.8.0", "x")];
    const base = [parsePin("torch==2.15.0", "x")];
    const plain = environmentName(pins, base);
    expect(environmentName(pins, base, {})).toBe(plain);
    expect(environmentName(pins, base, { requires: [], noDeps: [] })).toBe(plain);
    const needs = { requires: ["tqdm", "tensordict==0.9.1"], noDeps: ["torchrec"] };
    expect(environmentName(pins, base, needs)).not.toBe(plain);
    expect(environmentName(pins, base, { requires: ["TensorDict==0.9.1", "tqdm", "tqdm"], noDeps: ["TorchRec"] })).toBe(environmentName(pins, base, needs));
    expect(environmentName(pins, base, { ...needs, requires: ["tqdm", "tensordict==0.11.0"] })).not.toBe(environmentName(pins, base, needs));
    expect(normalizeInstall({ requires: ["pyre_extensions", "iopath"], noDeps: [] })).toEqual({ requires: ["iopath", "pyre-extensions"], noDeps: [] });
    // torchrec: itself without its dependencies (its metadata asks for the CUDA-only fbgemm-gpu)
    expect(getFramework("torchrec").install).toMatchObject({ noDeps: ["torchrec"], requires: expect.arrayContaining(["tensordict==0.9.1", "torchmetrics==1.0.3"]) });
  });

  const torch = torchAvailability();
  it.runIf(torch.run)(
    "a release the registry does not have is refused in one line naming it, and leaves no half-built environment",
    () => {
      const dir = tmp();
      try {
        expect(() => environmentFor([parsePin("deepspeed==0.0.999", "--with")], { cacheDir: dir, log: () => {} })).toThrow(/^--with deepspeed==0\.0\.999: no release deepspeed==0\.0\.999 on the package registry$/);
        expect(readdirSync(dir)).toEqual([]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    300_000,
  );
});

describe("bisect's releases", () => {
  const all = ["0.18.9", "0.19.0", "0.19.1", "0.19.2", "0.19.10", "0.19.3"].sort(compareVersions);
  it("orders releases by number, not text", () => {
    expect(all).toEqual(["0.18.9", "0.19.0", "0.19.1", "0.19.2", "0.19.3", "0.19.10"]);
  });
  it("takes A..B inclusive and refuses an end that is no release", () => {
    expect(releasesBetween(all, "0.19.0..0.19.3", "deepspeed")).toEqual(["0.19.0", "0.19.1", "0.19.2", "0.19.3"]);
    expect(() => releasesBetween(all, "0.19.0..0.19.4", "deepspeed")).toThrow(/--releases: deepspeed 0\.19\.4 is not a release on the registry/);
    expect(() => releasesBetween(all, "0.19.3..0.19.0", "deepspeed")).toThrow(/0\.19\.3 is not older than 0\.19\.0/);
    expect(() => releasesBetween(all, "0.19.0", "deepspeed")).toThrow(/is not A\.\.B/);
  });
  it("bisects to the first release whose verdict differs, in at most ceil(log2 n) + 1 runs", async () => {
    const releases = Array.from({ length: 9 }, (_, i) => `0.19.${i}`);
    for (let boundary = 1; boundary < releases.length; boundary++) {
      const ran: string[] = [];
      const verdict = async (r: string) => (ran.push(r), Number(r.split(".")[2]) >= boundary ? "pass" : "fail parity.norm");
      expect(await bisectReleases(releases, verdict)).toEqual([releases[boundary - 1], releases[boundary]]);
      expect(new Set(ran).size).toBeLessThanOrEqual(Math.ceil(Math.log2(releases.length)) + 1);
    }
    expect(await bisectReleases(releases, async () => "pass")).toBeNull();
  });
  it("the release lines take the last patch of every minor", () => {
    expect(lastPatches(["0.12.6", "0.13.0", "0.13.5", "0.14.0", "0.14.2"], "0.13")).toEqual(["0.13.5", "0.14.2"]);
  });
  it("a release runs the smoke cell in the one dtype its adapter builds, and a smoke cell no check ran is no pass", () => {
    expect(smokeCellOf(getFramework("deepspeed-engine"))).toBe(SMOKE_CELL.replace("/f32/", "/bf16/"));
    expect(smokeCellOf(getFramework("deepspeed"))).toBe(SMOKE_CELL);
    const check = (id: string, status: "pass" | "fail" | "skip", message = "") => ({ id, status, message, severity: "correctness" as const });
    expect(releaseVerdict({ checks: [check("parity.norm", "skip", "not applicable: its inputs are built in bf16 only\nmore"), check("liveness", "skip")] })).toBe("not run: not applicable: its inputs are built in bf16 only");
    expect(releaseVerdict({ checks: [check("parity.norm", "fail", "rank 0: total norm 2\nmore"), check("liveness", "pass")] })).toBe("fail parity.norm: rank 0: total norm 2");
    expect(releaseVerdict({ checks: [check("parity.norm", "pass"), check("errors.nonfinite", "skip")] })).toBe("pass");
  });
});

describe("history rows", () => {
  it("every row loads, names a check and runs a torch: subject on both sides", () => {
    const rows = loadHistoryRows();
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) {
      expect(sideSubject(r, "buggy")).toMatch(/^torch:[^@]+@/);
      // the cell's own reproduce line, its subject pinned to the side's releases
      expect(rerunLine(r, "buggy", r.cells[0]!)).toContain(`--subject ${sideSubject(r, "buggy")} --layout ${r.cells[0]!.split("/")[0]}`);
      expect(rerunLine(r, "fixed", r.cells[0]!)).toContain(`--subject ${sideSubject(r, "fixed")} `);
    }
  });
  it("a bad row is refused naming its file and field", () => {
    const dir = tmp();
    try {
      const good = JSON.parse(readFileSync(join(HISTORY_DIR, "deepspeed-clip-norm-type.json"), "utf8"));
      const file = join(dir, "deepspeed-clip-norm-type.json");
      writeFileSync(file, JSON.stringify({ ...good, buggy: { pins: ["deepspeed>=0.19"] } }));
      expect(() => loadHistoryRow(file)).toThrow(/buggy\.pins\[0\]: pin: "deepspeed>=0\.19" is not PKG==VERSION/);
      writeFileSync(file, JSON.stringify({ ...good, cells: ["single/llama3-debug/f99/n1/active/s0"] }));
      expect(() => loadHistoryRow(file)).toThrow(/field cells/);
      writeFileSync(file, JSON.stringify({ ...good, id: "other" }));
      expect(() => loadHistoryRow(file)).toThrow(/field id: "other" is not the file's name/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const DATA = join(PROJECT_ROOT, "docs", "history.json");
describe("docs/history.md", () => {
  const data = (existsSync(DATA) ? JSON.parse(readFileSync(DATA, "utf8")) : { rows: [], releases: [] }) as HistoryData;
  it("is the rendering of docs/history.json", () => {
    expect(readFileSync(join(PROJECT_ROOT, "docs", "history.md"), "utf8")).toBe(renderHistory(data));
  });
  it("holds an outcome of every row as the row file pins it (a row edited without a rerun fails here)", () => {
    const rows = loadHistoryRows();
    expect(data.rows.map((o) => o.id).sort()).toEqual(rows.map((r) => r.id).sort());
    for (const r of rows) {
      const o = data.rows.find((x) => x.id === r.id)!;
      expect([o.buggy.pins, o.fixed.pins]).toEqual([r.buggy.pins, r.fixed.pins]);
      if (!o.buggy.notRun) expect(o.buggy.cells.map((c) => c.id.split("/").slice(-6).join("/"))).toEqual(r.cells);
      if (o.script) expect(existsSync(join(PROJECT_ROOT, "docs", "history", o.script.path))).toBe(true);
    }
  });
  it("the README quotes the page's headline", () => {
    expect(readFileSync(join(PROJECT_ROOT, "README.md"), "utf8")).toContain(headline(data));
  });
});

/**
 * The README cannot drift from the code (issue 11): every figure it quotes (cell counts, model totals,
 * subject counts, the mutation score, the command line's usage) sits between `<!--fig:NAME-->` markers
 * and must equal what scripts/readme-figures.ts computes; its links point at files that exist; and the
 * library example it shows runs.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execaNode } from "execa";
import semver from "semver";
import { describe, expect, it } from "vitest";
import { applyFigures, computeFigures, figuresIn, README } from "../scripts/readme-figures.ts";
import { BUILTIN_SUBJECTS } from "../harness/registry/registry.ts";
import { loadMatrixFile } from "../matrix/index.ts";

const ROOT = join(import.meta.dirname, "..");
const text = readFileSync(README, "utf8");
const figures = computeFigures();

describe("README.md figures", () => {
  it("every quoted figure is the one the code gives (fix: npx tsx scripts/readme-figures.ts --write)", () => {
    const drifted = figuresIn(text)
      .filter((u) => u.value !== figures[u.name])
      .map((u) => `${u.name}: README says ${JSON.stringify(u.value)}, the code gives ${JSON.stringify(figures[u.name])}`);
    expect(drifted).toEqual([]);
  });

  it("quotes every figure at least once, and none that is unknown", () => {
    const quoted = new Set(figuresIn(text).map((u) => u.name));
    expect(Object.keys(figures).filter((n) => !quoted.has(n))).toEqual([]);
    expect([...quoted].filter((n) => !Object.hasOwn(figures, n))).toEqual([]);
  });

  it("a stale value is found and rewritten; an unknown name is refused with its name", () => {
    const stale = "cpu: <!--fig:cpu.cells-->999<!--/fig--> cells";
    expect(figuresIn(stale)).toEqual([{ name: "cpu.cells", value: "999" }]);
    expect(applyFigures(stale, figures)).toBe(`cpu: <!--fig:cpu.cells-->${figures["cpu.cells"]}<!--/fig--> cells`);
    expect(() => applyFigures("<!--fig:cpu.celss-->1<!--/fig-->", figures)).toThrow(/README\.md: unknown figure "cpu\.celss"; known: .*cpu\.cells/);
  });

  it("the cpu figures are the matrix's: cells = cases x subjects", () => {
    const n = (name: string) => Number(figures[name]!.replace(/,/g, ""));
    expect(n("cpu.cells")).toBe(n("cpu.cases") * n("cpu.subjects"));
    expect(n("cpu.cases")).toBeGreaterThan(0);
  });
});

describe("README.md links and examples", () => {
  it("the matrix file it shows loads as it is (normType, normTypes), into the cases it lists and sweeps", () => {
    const json = /Your own matrix is a JSON file[\s\S]*?```json\n([\s\S]*?)```/.exec(text)?.[1];
    expect(json, "the README shows a matrix file").toBeDefined();
    const file = join(mkdtempSync(join(tmpdir(), "cp-readme-")), "mine.json");
    writeFileSync(file, json!);
    const m = loadMatrixFile(file);
    expect(m.cases).toHaveLength(1 + 2 * 1 * 2 * 3 * 2 * 1);
    expect(m.cases[0]).toMatchObject({ model: "llama3-debug", dtype: "bf16", normType: Infinity, regime: "boundary", seed: 3 });
  });

  it("every relative link points at a file of the repository", () => {
    const links = [...text.matchAll(/\]\(((?!https?:)[^)#\s]+)\)/g)].map((m) => m[1]!);
    expect(links.length).toBeGreaterThan(3);
    expect(links.filter((l) => !existsSync(join(ROOT, l)))).toEqual([]);
  });

  it("examples/run-library.ts (the library road the README shows) runs its matrix: 4 cells pass", { timeout: 120_000 }, async () => {
    const r = await execaNode(join(ROOT, "examples/run-library.ts"), [], { cwd: ROOT, nodeOptions: ["--import", "tsx"], reject: false });
    expect(r.exitCode, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^4 passed, 0 failed$/m);
  });
});

describe("README.md set-up", () => {
  it("names what the full suite needs beyond npm ci, with the versions and the commands .ci/run installs them with", () => {
    const ci = readFileSync(join(ROOT, ".ci/run"), "utf8");
    const setupTorch = readFileSync(join(ROOT, "scripts/setup-torch.mjs"), "utf8");
    const chromium = /apt-get install -y[^\n]*--no-install-recommends chromium/.exec(ci)?.[0];
    expect(chromium, ".ci/run installs chromium").toBeDefined();
    expect(text).toContain(`\`${chromium!.replace(" -qq", "")}\``);
    expect(ci).toContain("npm run setup:torch");
    const minimum = /torch needs (3\.\d+) or newer/.exec(setupTorch)?.[1];
    expect(text).toContain(`**Python ${minimum} or newer**`);
    expect(text).toContain("`npm run setup:torch` installs PyTorch from PyPI into `.venv/`");
  });

  it("runs the command-line program inside the repository without npx, which would install the repository into its cache and rebuild the addon", () => {
    expect(text).toContain("npm ci && npm run clip-parity -- run --matrix cpu --json out/cpu.json");
    const commands = text.split("\n").filter((l) => /^(\$ )?(npm ci && )?npx clip-parity\b/.test(l));
    expect(commands, "README lines that run npx clip-parity in the repository").toEqual([]);
    expect(JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).scripts["clip-parity"]).toBe("node bin/clip-parity.js");
  });

  it("gives the measured durations of the main job and of plain npm test, and what --matrix runs", () => {
    // measured by npm run main-job into docs/main-job.json, the README's figures read from it
    expect(text).toMatch(/the main job measured <!--fig:main-job\.wall-->\d+( min \d+)? s<!--\/fig-->/);
    expect(text).toMatch(/<!--fig:main-job\.rss-->\d+\.\d GB<!--\/fig--> peak resident set/);
    expect(text).toMatch(/plain `npm test`[^.]*\d+ min \d+ s/);
    expect(text).toContain("`npm test -- --matrix gpu4` runs that matrix's test alone (`suites/matrix.test.ts`");
  });
});

describe("npm ci on Node 20", () => {
  // npm warns EBADENGINE for an installed package whose engines.node leaves out the running Node: the README
  // promises Node 20, and @napi-rs/cli 3 pulls in two packages that want Node 22 (package.json "overrides").
  it("installs no package whose engines.node leaves out Node 20 (npm would warn EBADENGINE)", () => {
    const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as { packages: Record<string, { engines?: { node?: string }; os?: string[]; cpu?: string[] }> };
    const node20 = process.versions.node.startsWith("20.") ? process.versions.node : "20.19.0";
    const installedHere = (p: { os?: string[]; cpu?: string[] }) => (!p.os || p.os.includes(process.platform)) && (!p.cpu || p.cpu.includes(process.arch));
    const refusing = Object.entries(lock.packages)
      .filter(([path, p]) => path && installedHere(p) && p.engines?.node && !semver.satisfies(node20, p.engines.node))
      .map(([path, p]) => `${path.replace(/^.*node_modules\//, "")} wants node ${p.engines!.node}`);
    expect(refusing, `on Node ${node20}`).toEqual([]);
    // the check itself: a range that leaves Node 20 out is caught
    expect(semver.satisfies(node20, "^22.20 || ^24.12 || >=25")).toBe(false);
  });
});

describe("README.md subjects table", () => {
  it("lists every built-in subject once, with the checks its catchBy names (adding a subject means its row)", () => {
    const start = text.indexOf("| subject | models | expected | caught by |");
    expect(start).toBeGreaterThan(0);
    const lines = text.slice(start).split("\n");
    const rows = lines.slice(2, lines.findIndex((l) => !l.startsWith("|"))).map((l) => l.split("|").map((c) => c.trim()));
    const table = new Map(rows.map((r) => [r[1]!.replace(/`/g, ""), [...r[4]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!).sort()]));
    expect(rows.length).toBe(table.size);
    expect([...table.keys()].sort()).toEqual(Object.keys(BUILTIN_SUBJECTS).sort());
    for (const [name, s] of Object.entries(BUILTIN_SUBJECTS)) expect(table.get(name), name).toEqual([...(s.catchBy ?? [])].sort());
  });
});

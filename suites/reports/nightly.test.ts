/**
 * .github/workflows/nightly.yml is only an example here (no GPU runner runs it), so this suite keeps it
 * honest: it parses, its jobs are wired together, every clip-parity command and flag it uses exists,
 * its shards cover each gpu matrix exactly, the committed baseline it gates against is a valid result
 * file holding exactly the cells the night produces, and the gate job's commands run as written.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { describe, expect, it } from "vitest";
import { builtinMatrices, cellsOf, MATRIX_NAMES } from "../../matrix/index.ts";
import { CORRECT_SUBJECTS } from "../../harness/registry/registry.ts";
import { cellId } from "../../harness/cell/cell.ts";
import { inShard, parseShard } from "../../harness/run/shard.ts";
import { readResultFile, summarizeJson } from "../../harness/results/schema.ts";
import { cli, tempDir } from "./fixtures.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const WORKFLOW = join(ROOT, ".github/workflows/nightly.yml");
const BASELINE = "golden/baseline-gpu.json";

interface Step {
  name?: string;
  uses?: string;
  run?: string;
  with?: Record<string, unknown>;
  if?: string;
}
interface Job {
  "runs-on": unknown;
  needs?: string | string[];
  strategy?: { matrix: { include?: Record<string, unknown>[]; [k: string]: unknown } };
  steps: Step[];
}

const workflow = parse(readFileSync(WORKFLOW, "utf8"), { strict: true, uniqueKeys: true }) as { name: string; on: Record<string, unknown>; jobs: Record<string, Job> };

/** Shell words of one command line (double and single quotes, no expansions but the ones we apply). */
function words(line: string): string[] {
  const out: string[] = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  for (const m of line.matchAll(re)) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

/** Command lines of a run: block, continuations joined, split at && ; and |. */
function commands(script: string): string[] {
  return script
    .replace(/\\\n\s*/g, " ")
    .split("\n")
    .flatMap((l) => l.split(/&&|;|\|\|?/))
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"));
}

/** `node bin/clip-parity.js CMD ...` / `npx clip-parity CMD ...` / `clip-parity CMD ...` -> [CMD, ...args]. */
function clipParityArgs(line: string): string[] | null {
  const w = words(line);
  const at = w.findIndex((x) => x === "bin/clip-parity.js" || x === "clip-parity");
  if (at < 0) return null;
  return w.slice(at + 1);
}

function expand(text: string, vars: Record<string, unknown>): string {
  return text.replace(/\$\{\{\s*matrix\.(\w+)\s*\}\}/g, (m, k: string) => (k in vars ? String(vars[k]) : m));
}

async function usage(): Promise<Map<string, string>> {
  const r = await cli(["help"]);
  expect(r.code).toBe(0);
  const map = new Map<string, string>();
  let current = "";
  for (const line of r.stdout.split("\n")) {
    const m = /^ {2}(\w+) {2,}(.*)$/.exec(line);
    if (m) {
      current = m[1];
      map.set(current, m[2]);
    } else if (current && /^ {4,}\S/.test(line)) map.set(current, `${map.get(current)} ${line.trim()}`);
    else current = "";
  }
  return map;
}

describe(".github/workflows/nightly.yml", () => {
  it("parses, runs on a schedule, and its jobs are wired together", () => {
    expect(workflow.name).toBe("nightly");
    expect(workflow.on).toHaveProperty("schedule");
    expect(Object.keys(workflow.jobs)).toEqual(["matrix", "gate", "mutation", "exhaustive", "unit", "unit-report"]);
    for (const [name, job] of Object.entries(workflow.jobs)) {
      expect(job["runs-on"], `${name} runs-on`).toBeTruthy();
      expect(job.steps.length, `${name} steps`).toBeGreaterThan(0);
      for (const s of job.steps) expect(Boolean(s.uses) !== Boolean(s.run), `${name}: a step has uses or run`).toBe(true);
      for (const need of [job.needs ?? []].flat()) expect(workflow.jobs, `${name} needs ${need}`).toHaveProperty(need);
    }
    expect(workflow.jobs.gate.needs).toBe("matrix");
    expect(workflow.jobs["unit-report"].needs).toBe("unit");
    const uploads = workflow.jobs.gate.steps.filter((s) => s.uses?.startsWith("actions/upload-artifact"));
    expect(uploads.map((s) => s.with?.path)).toContain("out/report/");
  });

  it("shards each gpu matrix so that its shards cover its cells exactly once", () => {
    const include = workflow.jobs.matrix.strategy!.matrix.include!;
    const byMatrix = new Map<string, { shard: number; shards: number }[]>();
    for (const e of include) byMatrix.set(String(e.matrix), [...(byMatrix.get(String(e.matrix)) ?? []), { shard: Number(e.shard), shards: Number(e.shards) }]);
    expect([...byMatrix.keys()].sort()).toEqual(MATRIX_NAMES.filter((m) => m.startsWith("gpu")).sort());
    for (const [m, list] of byMatrix) {
      const n = list[0].shards;
      expect(list.every((x) => x.shards === n), `${m}: one shard count`).toBe(true);
      expect(list.map((x) => x.shard).sort()).toEqual(Array.from({ length: n }, (_, i) => i + 1));
      const ids = cellsOf(builtinMatrices()[m], CORRECT_SUBJECTS).map(cellId);
      const covered = list.flatMap((x) => ids.filter((id) => inShard(id, parseShard(`${x.shard}/${x.shards}`))));
      expect(covered.sort()).toEqual([...ids].sort());
    }
  });

  it("uses only clip-parity commands and flags that exist, and npm scripts that exist", async () => {
    const commandsUsage = await usage();
    expect([...commandsUsage.keys()]).toEqual(expect.arrayContaining(["run", "gate", "merge", "report"]));
    const scripts = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).scripts as Record<string, string>;
    let invocations = 0;
    for (const [name, job] of Object.entries(workflow.jobs)) {
      const variants = job.strategy?.matrix.include ?? [Object.fromEntries(Object.entries(job.strategy?.matrix ?? {}).map(([k, v]) => [k, [v].flat()[0]]))];
      for (const vars of variants)
        for (const step of job.steps) {
          if (!step.run) continue;
          for (const line of commands(expand(step.run, vars))) {
            expect(line, `${name}: unexpanded matrix variable`).not.toMatch(/\$\{\{\s*matrix\./);
            const w = words(line);
            if (w[0] === "npm" && w[1] === "test") expect(scripts).toHaveProperty("test");
            if (w[0] === "npm" && w[1] === "run") expect(scripts, `${name}: npm run ${w[2]}`).toHaveProperty(w[2]);
            if (w[0] === "node") expect(existsSync(join(ROOT, w[1])), `${name}: ${w[1]}`).toBe(true);
            const args = clipParityArgs(line);
            if (!args) continue;
            invocations++;
            const [command, ...rest] = args;
            const text = commandsUsage.get(command);
            expect(text, `${name}: clip-parity ${command} is not a command`).toBeDefined();
            for (const a of rest.filter((x) => x.startsWith("--"))) {
              const flag = a.split("=")[0];
              expect(text, `${name}: clip-parity ${command} has no flag ${flag}`).toMatch(new RegExp(`${flag}(?=[\\s\\]]|$)`));
            }
            if (command === "run") {
              const matrix = rest[rest.indexOf("--matrix") + 1];
              expect(MATRIX_NAMES).toContain(matrix);
              expect(() => parseShard(rest[rest.indexOf("--shard") + 1])).not.toThrow();
            }
            for (const f of ["--baseline"]) if (rest.includes(f)) expect(existsSync(join(ROOT, rest[rest.indexOf(f) + 1])), `${f} file`).toBe(true);
          }
        }
    }
    expect(invocations).toBeGreaterThanOrEqual(7 + 3); // one run per shard, merge, report, gate
  });

  it(`gates against ${BASELINE}: a valid result file holding exactly the cells the night runs`, () => {
    const baseline = readResultFile(join(ROOT, BASELINE));
    expect(baseline.summary).toEqual(summarizeJson(baseline.cells));
    const expected = MATRIX_NAMES.filter((m) => m.startsWith("gpu")).flatMap((m) => cellsOf(builtinMatrices()[m], CORRECT_SUBJECTS).map(cellId));
    const have = new Set(baseline.cells.map((c) => c.id));
    const seen = new Set<string>();
    const duplicates = baseline.cells.map((c) => c.id).filter((id) => seen.has(id) || !seen.add(id));
    expect(duplicates.slice(0, 5), `${BASELINE} holds ${duplicates.length} duplicate cells: a cell is gated once`).toEqual([]);
    const missing = [...new Set(expected)].filter((id) => !have.has(id));
    const extra = [...have].filter((id) => !expected.includes(id));
    expect(
      { missing: missing.slice(0, 5), extra: extra.slice(0, 5) },
      `${BASELINE} is out of date with the gpu matrices; regenerate it: for m in gpu1 gpu4 gpu8, ` +
        `clip-parity run --matrix $m --backend cpu --json out/base-$m.json; then clip-parity merge --out ${BASELINE} out/base-*.json`,
    ).toEqual({ missing: [], extra: [] });
    expect(baseline.summary.failed).toBe(0);
  });

  it("the gate job's merge, report and gate commands run as written (on the baseline split in two shards)", async () => {
    const dir = tempDir("clip-parity-nightly-");
    const baseline = readResultFile(join(ROOT, BASELINE));
    mkdirSync(join(dir, "out/shards"), { recursive: true });
    for (const i of [1, 2]) {
      const cells = baseline.cells.filter((c) => inShard(c.id, { index: i, count: 2 }));
      writeFileSync(join(dir, `out/shards/results-${i}.json`), JSON.stringify({ cells, summary: summarizeJson(cells) }));
    }
    const summary = join(dir, "summary.md");
    writeFileSync(summary, "");
    const ran: string[] = [];
    for (const step of workflow.jobs.gate.steps) {
      if (!step.run) continue;
      for (const line of commands(step.run)) {
        const args = clipParityArgs(line);
        if (!args) continue;
        const fixed = args.flatMap((a) => {
          if (a === "out/shards/*.json") return [1, 2].map((i) => join(dir, `out/shards/results-${i}.json`));
          if (a.startsWith("out/")) return [join(dir, a)];
          if (a === BASELINE) return [join(ROOT, a)];
          return [a];
        });
        const r = await cli(fixed, { GITHUB_STEP_SUMMARY: summary });
        expect(r.code, `${args.join(" ")}\n${r.stderr}`).toBe(0);
        ran.push(args[0]);
        if (args[0] === "gate") expect(r.stdout).toContain("no regression");
      }
    }
    expect(ran).toEqual(["merge", "report", "gate"]);
    for (const f of ["out/nightly.json", "out/report/report.html", "out/report/summary.md", "out/report/junit.xml", "out/report/gate.md"]) {
      expect(existsSync(join(dir, f)), f).toBe(true);
    }
  });
});

/**
 * The kept weakenings (issue 57): each patch in this folder weakens one guard of the code, by hand, the way a bug or a
 * mutant would, and names the one test that must fail under it (WEAKENINGS below). Each was seen to fail that test
 * when it was written. So that a patch cannot rot silently (the code it weakens moves on and it no longer applies, or
 * its test is renamed away), this file checks on every run that each patch still applies cleanly to the tree
 * (`git apply --check`), touches the one file it names, and that its test still exists.
 *
 * With CLIP_PARITY_WEAKENINGS=1 it also applies each patch in a temporary copy of the tree (the tracked and
 * unignored files, the native addon, node_modules linked) and runs the test's file there with vitest, asserting that
 * the test fails (a minute or two on 2 cores, so not on every run):
 *
 *   CLIP_PARITY_WEAKENINGS=1 npx vitest run suites/weakenings/weakenings.test.ts
 *
 * To make a new one: weaken the guard in the tree, see the test fail, `git diff FILE > suites/weakenings/NAME.patch`,
 * `git checkout FILE`, and add the patch to WEAKENINGS.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const HERE = join(ROOT, "suites", "weakenings");

interface Weakening {
  /** The patch's file name in this folder: named after the guard it weakens. */
  patch: string;
  /** The file the patch changes. */
  file: string;
  /** What the guard is, that the patch takes away. */
  guard: string;
  /** The test file and the title of the one test in it that must fail under the patch. */
  test: string;
  title: string;
}

const WEAKENINGS: readonly Weakening[] = [
  {
    patch: "train-parity-last-step-uncompared.patch",
    file: "harness/training/train-parity.ts",
    guard: "train.parity compares the states after the last step too (a fault there is masked by no earlier comparison)",
    test: "suites/paths/last-step.test.ts",
    title: "the states agree after every step but the last: train.parity fails at step T",
  },
  {
    patch: "world-failed-collective-joins.patch",
    file: "harness/world/world.ts",
    guard: "a mismatched collective joins no ranks for comm.reach (liveness fails such a cell anyway, masking it)",
    test: "suites/paths/reach.test.ts",
    title: "a mismatched collective joins no ranks",
  },
  {
    patch: "judge-thread-no-free-on-error.patch",
    file: "harness/judge/judge-worker.ts",
    guard: "the judge thread frees what it allocated when a judging step throws",
    test: "suites/paths/judge-error.test.ts",
    title: "in the judge's thread: a dump that cannot be written: the write's error, not 'ledger not zero'",
  },
  {
    patch: "fs-dangling-link-replaced.patch",
    file: "harness/util/fs.ts",
    guard: "a write through a dangling symlink creates the file it names and keeps the link",
    test: "suites/paths/dangling-symlink.test.ts",
    title: "a relative dangling link: the link stays, the file it names is created (its folder too), nothing else left",
  },
  {
    patch: "fs-writable-check-link-end.patch",
    file: "harness/util/fs.ts",
    guard: "the check before any work follows a dangling symlink to where the write lands",
    test: "suites/paths/dangling-symlink.test.ts",
    title: "the checks before any work refuse a dangling link whose file cannot be created (a file where its folder would be)",
  },
  {
    patch: "causes-first-failed-check.patch",
    file: "harness/external/causes.ts",
    guard: "a frameworks cell with no cause read takes the highest severity of its failed checks",
    test: "suites/paths/severity.test.ts",
    title: "no cause read: the highest of the failed checks' severities, whatever their order",
  },
  {
    patch: "export-minimal-ties-dropped.patch",
    file: "harness/external/torch/export.ts",
    guard: "a minimised export keeps the ties of the parameters it keeps",
    test: "suites/paths/export-tied.test.ts",
    title: "the last stage builds the tied replica of the kept canonical parameter; the first stage the canonical copy",
  },
  {
    patch: "comm-budget-group-per-mesh.patch",
    file: "harness/checks/comm-budget.ts",
    guard: "comm.budget counts two meshes reducing over the same ranks as one reduction group",
    test: "suites/paths/groups.test.ts",
    title: "a clip that all_reduces once per mesh over the same ranks goes over, and the message names both meshes' axes",
  },
  {
    patch: "comm-budget-axes-separator.patch",
    file: "harness/checks/comm-budget.ts",
    guard: "comm.budget's message separates the meshes' axes of one group (comm-budget.ts:69's survivor)",
    test: "suites/paths/groups.test.ts",
    title: "a clip that all_reduces once per mesh over the same ranks goes over, and the message names both meshes' axes",
  },
  {
    patch: "world-reach-one-hop.patch",
    file: "harness/world/world.ts",
    guard: "a collective carries to its members everything that had reached any of them",
    test: "suites/paths/reach.test.ts",
    title: "A joins B, then B joins C: C has A's data (and A has not heard from C)",
  },
  {
    patch: "world-reach-unordered.patch",
    file: "harness/world/world.ts",
    guard: "a collective joins its members only, after what reached them before (the order matters)",
    test: "suites/paths/reach.test.ts",
    title: "B joins C, then A joins B: C has not heard from A (the order matters)",
  },
];

const git = (args: string[], cwd = ROOT) => spawnSync("git", args, { cwd, encoding: "utf8" });

describe("the kept weakenings still apply and name their tests", () => {
  it("every patch in the folder is listed, and every listed patch is there", () => {
    const files = readdirSync(HERE).filter((f) => f.endsWith(".patch")).sort();
    expect(WEAKENINGS.map((w) => w.patch).sort()).toEqual(files);
  });

  for (const w of WEAKENINGS) {
    it(`${w.patch} applies cleanly to ${w.file}, and its test exists: ${w.title}`, () => {
      const text = readFileSync(join(HERE, w.patch), "utf8");
      const touched = [...text.matchAll(/^\+\+\+ b\/(.+)$/gm)].map((m) => m[1]);
      expect(touched, "the patch changes exactly the file it names").toEqual([w.file]);
      expect(text).toMatch(/^\+.*WEAKENED/m); // the changed line says so, should the patch ever be applied by mistake
      const check = git(["apply", "--check", join(HERE, w.patch)]);
      expect(check.status, `git apply --check ${w.patch}: ${check.stderr}`).toBe(0);
      expect(readFileSync(join(ROOT, w.test), "utf8")).toContain(JSON.stringify(w.title).slice(1, -1));
    });
  }
});

// ---- opt-in: apply each patch in a copy of the tree and see its test fail --------------------------------------------

const RUN = (process.env.CLIP_PARITY_WEAKENINGS ?? "") !== "" && process.env.CLIP_PARITY_WEAKENINGS !== "0";
let copy: string | null = null;
afterAll(() => {
  if (copy) rmSync(copy, { recursive: true, force: true });
});

/** A copy of the tree to weaken: the tracked and unignored files, the native addon, node_modules linked. */
function copyOfTree(): string {
  const dir = mkdtempSync(join(tmpdir(), "clip-parity-weakened-"));
  const listed = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: ROOT, encoding: "utf8" }).split("\0");
  for (const f of listed) {
    if (!f || f === "node_modules" || f === ".venv" || !existsSync(join(ROOT, f))) continue;
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    cpSync(join(ROOT, f), join(dir, f), { dereference: false });
  }
  for (const f of readdirSync(join(ROOT, "native")).filter((n) => n.endsWith(".node"))) cpSync(join(ROOT, "native", f), join(dir, "native", f));
  symlinkSync(realpathSync(join(ROOT, "node_modules")), join(dir, "node_modules"));
  return dir;
}

/** The environment for the inner vitest: this run's own vitest variables left out. */
function innerEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("VITEST") && k !== "NODE_OPTIONS" && k !== "CLIP_PARITY_WEAKENINGS") env[k] = v;
  return env;
}

describe.runIf(RUN)("each kept weakening fails its test (CLIP_PARITY_WEAKENINGS=1)", () => {
  for (const w of WEAKENINGS) {
    it(`${w.patch}: ${w.test} > ${w.title} fails`, { timeout: 300_000 }, () => {
      copy ??= copyOfTree();
      const patch = join(HERE, w.patch);
      const applied = git(["apply", patch], copy);
      expect(applied.status, applied.stderr).toBe(0);
      try {
        const out = join(copy, `.weakened-${w.patch}.json`);
        const vitest = join(copy, "node_modules", "vitest", "vitest.mjs");
        const run = spawnSync(process.execPath, [vitest, "run", w.test, "--reporter=json", `--outputFile=${out}`], { cwd: copy, env: innerEnv(), encoding: "utf8", timeout: 280_000 });
        expect(existsSync(out), `vitest wrote no report: ${run.stderr.slice(-2000)}`).toBe(true);
        const report = JSON.parse(readFileSync(out, "utf8")) as { testResults: { assertionResults: { title: string; status: string }[] }[] };
        const results = report.testResults.flatMap((t) => t.assertionResults);
        const mine = results.filter((r) => r.title === w.title);
        expect(mine.length, `${w.test} ran no test titled "${w.title}"`).toBeGreaterThan(0);
        expect(mine.map((r) => r.status), `${w.patch} should fail "${w.title}"`).toEqual(mine.map(() => "failed"));
        expect(run.status).not.toBe(0);
      } finally {
        const reverted = git(["apply", "-R", patch], copy);
        expect(reverted.status, reverted.stderr).toBe(0);
      }
    });
  }
});

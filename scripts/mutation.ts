/**
 * `npm run mutation [-- --no-run --seconds S] [--set-before REPORT --before-seconds S --before-suite TEXT] [--render-only]`
 *
 * Runs StrykerJS (stryker.config.json: the correct subjects mutated, suites/mutation against each mutant),
 * then writes docs/mutation.json (the summary, scripts/docs/mutation-report.ts) and docs/strength.md (rendered
 * from it). Exit 1 when a mutant survives without an explanation in scripts/docs/mutation-report.ts: kill it
 * with a cell or a check, or explain why it is equivalent under the subject's tolerance class.
 * --no-run summarises the last report (reports-out/mutation/mutation.json) instead of running Stryker;
 * --set-before records a report as the "before" measurement the page compares with; --render-only writes
 * docs/strength.md again from the committed docs/mutation.json (after a change to the cpu matrix's size or
 * to the explanations), nothing run.
 *
 * --merge (with or without --no-run): the report is a scoped run (`npx stryker run --concurrency 1 --mutate FILE`,
 * on a machine too small for the whole scope): its files' figures replace theirs in docs/mutation.json, each
 * recorded with the commit it was measured on (the commit that gave the file the text Stryker
 * mutated, from the report; `uncommitted` when none) and --suite (`full`, or `fast` for MUTATION_SUITE=fast);
 * the other files keep theirs. The score is the sum over the files. The first merge into a whole run's data
 * records its files as measured on --base-commit.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { subjectsOf } from "../harness/run/policy.ts";
import { formatMutationData, mergeScoped, renderStrength, summarizeStryker, unexplained, type MutationData } from "./docs/mutation-report.ts";
import { OPTIMIZER_SUBJECTS } from "../harness/registry/registry.ts";
import { finalizeMatrix } from "../matrix/finalize.ts";
import { trainCases } from "../matrix/train.ts";
import { builtinMatrices } from "../matrix/index.ts";
import { loadRegressions } from "../matrix/regressions.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const REPORT = join(ROOT, "reports-out/mutation/mutation.json");
const DATA = join(ROOT, "docs/mutation.json");
const PAGE = join(ROOT, "docs/strength.md");

export function cpuSize(): { cases: number; cells: number } {
  const cpu = builtinMatrices().cpu!;
  return { cases: cpu.cases.length, cells: cpu.cases.length * subjectsOf(cpu, undefined).length };
}

export function suiteText(): string {
  const { cells } = cpuSize();
  const optimizer = `the finalize section's ${finalizeMatrix().cases.length} cases and the train section's ${trainCases("cpu").filter((c) => c.expect === "pass" && OPTIMIZER_SUBJECTS.includes(c.subject)).length} passing case(s) on ${OPTIMIZER_SUBJECTS.join(", ")}`;
  return `the cpu matrix (${cells} cells, each compared with golden/cpu.json) and the ${loadRegressions().length} regression cells on each correct subject, ${optimizer}, and the unit tests of the optimizer helpers, comm.budget, Partial gradients and gradient specs`;
}

/** The commit (short) that gave `file` the text `source` (the newest of the last 200 touching it whose text it is); `uncommitted` when none. */
export function commitHolding(file: string, source: string): string {
  const git = (...args: string[]) => spawnSync("git", args, { cwd: ROOT, encoding: "utf8", input: args[0] === "hash-object" ? source : undefined }).stdout.trim();
  const blob = git("hash-object", "--stdin");
  for (const c of git("log", "--format=%h", "-n", "200", "--", file).split("\n").filter(Boolean)) {
    if (git("rev-parse", `${c}:${file}`) === blob) return c;
  }
  return "uncommitted";
}

function main(): number {
  let v;
  try {
    v = parseArgs({
      args: process.argv.slice(2),
      options: {
        "no-run": { type: "boolean" },
        seconds: { type: "string" },
        "set-before": { type: "string" },
        "before-seconds": { type: "string" },
        "before-suite": { type: "string" },
        "render-only": { type: "boolean" },
        merge: { type: "boolean" },
        suite: { type: "string" },
        "base-commit": { type: "string" },
      },
      strict: true,
    }).values;
  } catch (err) {
    process.stderr.write(`mutation: ${(err as Error).message}\n`);
    return 2;
  }
  if (v["render-only"]) {
    writeFileAtomic(PAGE, renderStrength(JSON.parse(readFileSync(DATA, "utf8")) as MutationData, cpuSize()));
    process.stdout.write(`wrote ${PAGE} from ${DATA}\n`);
    return 0;
  }
  let seconds = Number(v.seconds ?? 0);
  if (!v["no-run"]) {
    const started = performance.now();
    const bin = join(ROOT, "node_modules/@stryker-mutator/core/bin/stryker.js");
    const r = spawnSync(process.execPath, [bin, "run", "stryker.config.json"], { cwd: ROOT, stdio: "inherit" });
    if (r.status !== 0) {
      process.stderr.write(`mutation: stryker exited with ${r.status ?? r.signal}\n`);
      return r.status ?? 1;
    }
    seconds = (performance.now() - started) / 1000;
  }
  if (!existsSync(REPORT)) {
    process.stderr.write(`mutation: no report at ${REPORT}: run without --no-run first\n`);
    return 2;
  }
  const previous: MutationData | null = existsSync(DATA) ? (JSON.parse(readFileSync(DATA, "utf8")) as MutationData) : null;
  let before = previous?.before ?? null;
  if (v["set-before"]) {
    const run = summarizeStryker(JSON.parse(readFileSync(v["set-before"], "utf8")), Number(v["before-seconds"] ?? 0));
    before = { ...run, suite: v["before-suite"] ?? "before" };
  }
  const report = JSON.parse(readFileSync(REPORT, "utf8")) as { files: Record<string, { source: string }> };
  const measured = summarizeStryker(report as Parameters<typeof summarizeStryker>[0], seconds);
  const suite = v.suite ?? (process.env.MUTATION_SUITE === "fast" ? "fast" : "full");
  const after = v.merge
    ? mergeScoped(previous?.after ?? null, measured, {
        commits: Object.fromEntries(Object.entries(report.files).map(([f, x]) => [f, commitHolding(f, x.source)])),
        suite,
      }, previous && !previous.after.runs ? { commits: Object.fromEntries(Object.keys(previous.after.files).map((f) => [f, v["base-commit"] ?? "unknown"])), suite: "full" } : undefined)
    : measured;
  const data: MutationData = { suite: suiteText(), after, before };
  writeFileAtomic(DATA, formatMutationData(data));
  const missing = unexplained(data);
  if (missing.length) {
    process.stderr.write(`mutation: ${missing.length} surviving mutant(s) without an explanation; docs/strength.md not written\n`);
    for (const u of missing) process.stderr.write(`  ${u.file}:${u.line}:${u.column} ${u.mutator}: ${u.original} -> ${u.replacement}\n`);
    return 1;
  }
  writeFileAtomic(PAGE, renderStrength(data, cpuSize()));
  process.stdout.write(`mutation score ${data.after.score}%: wrote ${DATA} and ${PAGE}\n`);
  return 0;
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) process.exitCode = main();

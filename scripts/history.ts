/**
 * `npm run history [-- --row ID]... [--no-releases] [--out DIR]`: runs every history row (adapters/torch/history/)
 * and writes docs/history.json, docs/history.md and each row's exported script (docs/history/); then tries the
 * smoke cell on the last patch release of every minor of the frameworks in RELEASE_LINES and on every row's
 * releases, recorded on the same page. A release's verdict is cached beside the environments (CLIP_PARITY_ENV_CACHE),
 * keyed by the committed code that decides it (VERDICT_CODE), so an interrupted run resumes where it stopped.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { historyRunners } from "../cli/history.ts";
import { defaultEnvironmentOptions, registryVersions, releaseEnvironment } from "../harness/external/torch/environments.ts";
import { loadHistoryRows, resolveHistoryRow, runHistoryRow, type HistoryRow, type RowOutcome } from "../harness/external/torch/history.ts";
import { listFrameworkSubjects, loadFrameworks, type Framework } from "../harness/external/torch/frameworks.ts";
import { caseKey, casesFor } from "../harness/external/frameworks-run.ts";
import { PROJECT_ROOT, torchOptionsFromEnv } from "../harness/external/torch/options.ts";
import { probeTorch } from "../harness/external/torch/subject.ts";
import { parseCellId } from "../harness/external/torch/export.ts";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { cellFailed, cellSkipped } from "../harness/results/summary.ts";
import type { CellResult } from "../harness/results/types.ts";
import { renderHistory, type HistoryData, type ReleaseRecord } from "./docs/history-page.ts";

/** The frameworks whose releases are tried, from which minor on (issue 53). */
export const RELEASE_LINES: readonly { framework: string; package: string; from: string; companions?: (version: string) => string[] }[] = [
  { framework: "deepspeed", package: "deepspeed", from: "0.13" },
  { framework: "torchtitan", package: "torchtitan", from: "0.1" },
  { framework: "accelerate", package: "accelerate", from: "1.0" },
  // torchrec's kernels come from fbgemm-gpu-cpu of the same version, built for one torch (FBGEMM's compatibility table)
  { framework: "torchrec", package: "torchrec", from: "1.0", companions: (v) => torchrecCompanions(v) },
];

/** fbgemm-gpu-cpu of torchrec's version and the torch it is built for: torchrec 1.N pairs with torch 2.(N + 5). */
export function torchrecCompanions(version: string): string[] {
  const minor = Number(version.split(".")[1]);
  return [`fbgemm-gpu-cpu==${version.split(".").slice(0, 2).join(".")}.0`, `torch==2.${minor + 5}.0`];
}

export const SMOKE_CELL = "single/llama3-debug/f32/n2/active/s0";

/** A release's verdict on its smoke cell, in one line: a cell it cannot be asked (no check ran) is no pass. */
export function releaseVerdict(r: Pick<CellResult, "checks">): string {
  const line = (m: string, n: number) => m.split("\n")[0]!.slice(0, n);
  if (cellFailed(r)) {
    const failed = r.checks.filter((c) => c.status === "fail");
    return `fail ${failed.map((c) => c.id).join(", ")}: ${line(failed[0]!.message, 200)}`;
  }
  return cellSkipped(r) ? `not run: ${line(r.checks[0]?.message ?? "", 200)}` : "pass";
}

/** The smoke cell as a framework runs it: in the one dtype its adapter builds, if it builds one only (casesFor). */
export function smokeCellOf(fw: Framework | undefined): string {
  if (!fw) return SMOKE_CELL;
  const [as] = casesFor(fw, [parseCellId(`torch:x/${SMOKE_CELL}`)]);
  return caseKey(as!);
}

/** The folders whose committed trees decide a release's verdict: the cache of verdicts is keyed by them. */
const VERDICT_CODE = ["harness", "adapters", "native", "cli", "matrix"];

/** The last patch release of every minor from `from` on, oldest first. */
export function lastPatches(versions: readonly string[], from: string): string[] {
  const [fm, fn] = from.split(".").map(Number) as [number, number];
  const byMinor = new Map<string, string>();
  for (const v of versions) {
    const [a, b] = v.split(".").map(Number) as [number, number];
    if (a < fm || (a === fm && b < fn)) continue;
    byMinor.set(`${a}.${b}`, v); // versions come oldest first: the last one seen is the last patch
  }
  return [...byMinor.values()];
}

async function main(): Promise<number> {
  const v = parseArgs({
    args: process.argv.slice(2),
    options: {
      row: { type: "string", multiple: true },
      "no-releases": { type: "boolean" },
      "no-rows": { type: "boolean" },
      "releases-budget-s": { type: "string" },
      out: { type: "string" },
      "timeout-s": { type: "string" },
    },
    strict: true,
  }).values;
  const out = resolve(v.out ?? join(PROJECT_ROOT, "docs"));
  const scripts = join(out, "history");
  const rows: HistoryRow[] = v["no-rows"] ? [] : v.row ? v.row.map(resolveHistoryRow) : loadHistoryRows();
  const timeoutMs = Number(v["timeout-s"] ?? "900") * 1000;
  const { load, run } = historyRunners(timeoutMs);
  const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: PROJECT_ROOT, encoding: "utf8" }).trim();
  const torch = probeTorch(torchOptionsFromEnv().python).torch;
  const log = (line: string) => process.stderr.write(`history: ${line}\n`);

  const previous: HistoryData | null = existsSync(join(out, "history.json")) ? (JSON.parse(readFileSync(join(out, "history.json"), "utf8")) as HistoryData) : null;
  const started = performance.now();
  const tmp = mkdtempSync(join(tmpdir(), "clip-parity-history-"));
  const outcomes: RowOutcome[] = [];
  try {
    for (const row of rows) {
      const o = await runHistoryRow(row, load, run, tmp, log);
      outcomes.push(o);
      log(`${row.id}: ${o.caught ? "caught" : `NOT CAUGHT: ${o.why}`}`);
    }
    mkdirSync(scripts, { recursive: true });
    for (const o of outcomes) if (o.script) copyFileSync(join(tmp, o.script.path), join(scripts, o.script.path));
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  // rows not run this time keep their last outcome (--row runs some)
  const rowIds = new Set(loadHistoryRows().map((r) => r.id));
  const kept = (previous?.rows ?? []).filter((o) => !outcomes.some((x) => x.id === o.id) && rowIds.has(o.id));
  const allRows = [...kept, ...outcomes].sort((a, b) => a.id.localeCompare(b.id));
  const live = new Set(allRows.flatMap((o) => (o.script ? [o.script.path] : [])));
  if (existsSync(scripts)) for (const f of readdirSync(scripts)) if (!live.has(f)) rmSync(join(scripts, f));
  // the rows' time as last measured for each row run now or kept
  const rowSeconds = rows.length ? (performance.now() - started) / 1000 + (kept.length && previous ? previous.seconds.rows : 0) : (previous?.seconds.rows ?? 0);

  const releasesStarted = performance.now();
  const data: HistoryData = {
    // the commit the rows ran on: a run of no rows keeps the last one's
    commit: rows.length ? commit : (previous?.commit ?? commit),
    torch,
    smoke: SMOKE_CELL,
    rows: allRows,
    releases: previous?.releases ?? [],
    releasesCommit: previous?.releasesCommit ?? commit,
    seconds: { rows: rowSeconds, releases: previous?.seconds.releases ?? 0 },
  };
  // written now and after every release tried: an interrupted run leaves a whole page of what it did
  const save = () => {
    mkdirSync(out, { recursive: true });
    writeFileAtomic(join(out, "history.json"), JSON.stringify(data, null, 2) + "\n");
    writeFileAtomic(join(out, "history.md"), renderHistory(data));
  };
  save();
  if (!v["no-releases"]) {
    const budgetS = Number(v["releases-budget-s"] ?? "Infinity");
    data.releases = [];
    data.releasesCommit = commit;
    await tryReleases(loadHistoryRows(), load, run, log, budgetS, (rec) => {
      data.releases.push(rec);
      data.seconds.releases = (performance.now() - releasesStarted) / 1000;
      save();
    });
  }
  process.stdout.write(`wrote ${join(out, "history.md")}: ${allRows.filter((o) => o.caught).length} of ${allRows.length} rows caught, ${data.releases.length} releases tried\n`);
  return allRows.every((o) => o.caught) ? 0 : 1;
}

/** The smoke cell on every release line's last patches and every row's releases; verdicts cached by commit. */
async function tryReleases(
  rows: readonly HistoryRow[],
  load: ReturnType<typeof historyRunners>["load"],
  run: ReturnType<typeof historyRunners>["run"],
  log: (l: string) => void,
  budgetS: number,
  onRecord: (rec: ReleaseRecord) => void,
): Promise<void> {
  const started = performance.now();
  const known = new Set(listFrameworkSubjects().map((s) => s.framework));
  const wanted: { framework: string; pins: string[] }[] = [];
  for (const line of RELEASE_LINES) {
    let versions: string[] = [];
    try {
      versions = registryVersions(line.package);
    } catch (err) {
      wanted.push({ framework: line.framework, pins: [`${line.package}==?`] });
      log(`${line.package}: ${(err as Error).message}`);
      continue;
    }
    for (const ver of lastPatches(versions, line.from)) wanted.push({ framework: line.framework, pins: [`${line.package}==${ver}`, ...(line.companions?.(ver) ?? [])] });
  }
  for (const r of rows) {
    for (const side of ["buggy", "fixed"] as const) {
      const fw = r.subject.replace(/^torch:/, "");
      if (!wanted.some((w) => w.framework === fw && w.pins.join(" ") === r[side].pins.join(" "))) wanted.push({ framework: fw, pins: r[side].pins });
    }
  }
  const cacheDir = join(defaultEnvironmentOptions().cacheDir, "..", "verdicts");
  // what decides a verdict: the committed code the cell runs through (a docs-only commit keeps the cache)
  const trees = execFileSync("git", ["rev-parse", ...VERDICT_CODE.map((d) => `HEAD:${d}`)], { cwd: PROJECT_ROOT, encoding: "utf8" });
  const codeKey = createHash("sha256").update(trees).digest("hex").slice(0, 12);
  mkdirSync(cacheDir, { recursive: true });
  const declared = loadFrameworks();
  for (const w of wanted) {
    const cell = smokeCellOf(declared.get(w.framework));
    // the cell is part of what decides the verdict: a framework run in another dtype keys it too
    const onCell = cell === SMOKE_CELL ? "" : `-${cell}`;
    const key = join(cacheDir, `${codeKey}-${w.framework}-${w.pins.join("_")}${onCell}`.replace(/[^A-Za-z0-9._=-]/g, "_") + ".json");
    if (existsSync(key)) {
      onRecord(JSON.parse(readFileSync(key, "utf8")) as ReleaseRecord);
      continue;
    }
    if ((performance.now() - started) / 1000 > budgetS) {
      // not cached, and the run's budget is spent: said so, never cached
      onRecord({ framework: w.framework, pins: w.pins, verdict: `not tried: the run's --releases-budget-s (${budgetS} s) was spent`, versions: {}, environment: null });
      continue;
    }
    const rec: ReleaseRecord = { framework: w.framework, pins: w.pins, verdict: "", versions: {}, environment: null, ...(onCell ? { cell } : {}) };
    if (!known.has(w.framework)) rec.verdict = `not run: no adapters/torch/frameworks/${w.framework}.json`;
    else if (w.pins.some((p) => p.endsWith("==?"))) rec.verdict = "not run: the registry lists no releases";
    else {
      const spec = `torch:${w.framework}@${w.pins.join(",")}`;
      log(`release ${w.pins.join(" ")} (${w.framework})`);
      try {
        const s = await load(spec);
        rec.versions = { ...(s.release?.record.versions ?? {}), torch: s.info.torch };
        rec.environment = s.release?.record.kind ?? "pinned";
        try {
          const [r] = await run([{ ...parseCellId(`${spec}/${cell}`), subject: spec }]);
          rec.verdict = releaseVerdict(r!);
        } finally {
          if (s.release) releaseEnvironment(s.release.dir);
        }
      } catch (err) {
        rec.verdict = `not run: ${(err as Error).message.split("\n")[0]!.slice(0, 300)}`;
      }
    }
    writeFileAtomic(key, JSON.stringify(rec) + "\n");
    onRecord(rec);
  }
}


if (import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    (code) => process.exit(code),
    (err) => {
      process.stderr.write(`history: ${(err as Error).message}\n`);
      process.exit(2);
    },
  );
}

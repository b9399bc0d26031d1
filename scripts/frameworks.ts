/**
 * `npm run frameworks [-- --frameworks a,b] [--out DIR] [--cell-timeout S] [--filter TEXT] [--render-only | --repros-only]`: runs
 * every declared framework (adapters/torch/frameworks/) over the gpu4 matrix and the cpu matrix's distinct shapes on
 * the cpu backend, then runs the exported script of every failure it lists standalone under torchrun (a failure
 * on the page is one that reproduces without clip-parity), and writes DIR/frameworks.json (every cell) and
 * DIR/frameworks.md (rendered from it) atomically; DIR defaults to docs/. Needs `npm run setup:torch`. Prints the
 * per-cell cost of the adapter at the end. --repros-only: the scripts again for the data already in DIR.
 */
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { caseKey, casesFor, formatFrameworksData, runFrameworks, type FrameworksData } from "../harness/external/frameworks-run.ts";
import { renderFrameworks } from "./docs/frameworks-page.ts";
import { frameworkCases } from "../matrix/frameworks.ts";
import { loadFrameworks } from "../harness/external/torch/frameworks.ts";
import { PROJECT_ROOT, torchOptionsFromEnv } from "../harness/external/torch/options.ts";
import { reproduceListedFailures } from "../harness/external/torch/repro-run.ts";
import { runFindings } from "../harness/external/torch/findings-run.ts";
import { builtinMatrices } from "../matrix/index.ts";

async function main(): Promise<number> {
  let v;
  try {
    v = parseArgs({
      args: process.argv.slice(2),
      options: { frameworks: { type: "string" }, out: { type: "string" }, "cell-timeout": { type: "string" }, filter: { type: "string" }, "render-only": { type: "boolean" }, "repros-only": { type: "boolean" }, "keep-others": { type: "boolean" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    process.stderr.write(`frameworks: ${(err as Error).message}\nusage: npm run frameworks [-- --frameworks a,b [--keep-others]] [--out DIR] [--cell-timeout S] [--filter TEXT] [--render-only | --repros-only]\n`);
    return 2;
  }
  const out = resolve(v.out ?? join(PROJECT_ROOT, "docs"));
  if (v["render-only"] || v["repros-only"]) {
    // After editing a framework file's `explain`: the page again from the committed data, nothing run; after
    // editing the export: its scripts again.
    const file = join(out, "frameworks.json");
    if (!existsSync(file)) {
      process.stderr.write(`frameworks: --${v["render-only"] ? "render" : "repros"}-only: ${file} does not exist (a run of npm run frameworks writes it)\n`);
      return 2;
    }
    const data = JSON.parse(readFileSync(file, "utf8")) as FrameworksData;
    // --frameworks with --repros-only: those frameworks' scripts only, the others' records kept
    if (v["repros-only"]) await reproduce(data, v.frameworks?.split(",").map((s) => s.trim()));
    if (v["repros-only"]) await findings(data, v.frameworks?.split(",").map((s) => s.trim()));
    writeFileAtomic(join(out, "frameworks.json"), formatFrameworksData(data));
    writeFileAtomic(join(out, "frameworks.md"), renderFrameworks(data));
    process.stdout.write(`wrote ${join(out, "frameworks.md")} from ${join(out, "frameworks.json")}\n`);
    return 0;
  }
  const declared = loadFrameworks();
  const known = [...declared.keys()];
  const names = v.frameworks ? v.frameworks.split(",").map((s) => s.trim()) : known;
  const unknown = names.filter((n) => !known.includes(n));
  if (unknown.length) {
    process.stderr.write(`frameworks: --frameworks: ${unknown.join(", ")} not in adapters/torch/frameworks/ (known: ${known.join(", ")})\n`);
    return 2;
  }
  const timeout = Number(v["cell-timeout"] ?? "30");
  if (!(timeout > 0)) {
    process.stderr.write(`frameworks: --cell-timeout: "${v["cell-timeout"]}" is not a positive number of seconds\n`);
    return 2;
  }
  // --filter: a part of the cells only (for trying a framework file out); the page then covers those cells.
  const cases = frameworkCases().filter((c) => !v.filter || caseKey(c).includes(v.filter));
  const total = names.reduce((n, name) => n + casesFor(declared.get(name)!, cases).length, 0);
  let done = 0;
  const started = performance.now();
  const { data, timing } = await runFrameworks(names, cases, { cellTimeoutS: timeout }, {
    onCell(fw, rec, seconds, log) {
      done++;
      const failed = rec.failed.length ? ` (${rec.failed.join(", ")})` : "";
      const ended = log?.sessionEnded ? `; session ended: ${log.sessionEnded}` : "";
      process.stderr.write(`[${done}/${total}] ${fw} ${rec.case}: ${rec.status}${failed} ${seconds.toFixed(2)} s${ended}\n`);
    },
  });
  const gpu4 = new Set(builtinMatrices().gpu4.cases.map(caseKey));
  const full: FrameworksData = { ...data, cases: { gpu4: cases.filter((c) => gpu4.has(caseKey(c))).length, distinctShapes: cases.filter((c) => !gpu4.has(caseKey(c))).length } };
  // --keep-others: a framework added or changed is run alone, the others keep their committed records (each says its version)
  const committedFile = join(out, "frameworks.json");
  if (v["keep-others"] && existsSync(committedFile)) {
    const before = JSON.parse(readFileSync(committedFile, "utf8")) as FrameworksData;
    const ran = new Map(full.frameworks.map((f) => [f.name, f]));
    const kept = before.frameworks.filter((f) => known.includes(f.name)).map((f) => ran.get(f.name) ?? f);
    full.frameworks = [...kept, ...full.frameworks.filter((f) => !kept.includes(f))];
    full.native = before.native;
  }
  await reproduce(full, names);
  await findings(full, names);
  mkdirSync(out, { recursive: true });
  writeFileAtomic(join(out, "frameworks.json"), formatFrameworksData(full));
  writeFileAtomic(join(out, "frameworks.md"), renderFrameworks(full));
  const wall = (performance.now() - started) / 1000;
  process.stdout.write(
    `wrote ${join(out, "frameworks.md")} and frameworks.json: ${names.length} frameworks, ${timing.cells} cells run in ${wall.toFixed(0)} s; ` +
      `${(timing.cellSeconds / Math.max(1, timing.cells)).toFixed(3)} s per cell (session starts excluded), ` +
      `${timing.sessionStarts} session starts, ${(timing.sessionSeconds / Math.max(1, timing.sessionStarts)).toFixed(1)} s each\n`,
  );
  return 0;
}

/** Runs the exported script of every failure the data lists; sets each record's `repro`. */
async function reproduce(data: FrameworksData, frameworks?: readonly string[]): Promise<void> {
  const { reproduced, of } = await reproduceListedFailures(data, torchOptionsFromEnv().python, (id, repro, run) => {
    const what = repro.reproduced ? `REPRODUCED (${repro.failed.join(", ")})` : `NOT reproduced (exit ${run.exitCode}): ${(run.stdout + run.stderr).trim().split("\n").slice(-3).join(" | ")}`;
    process.stderr.write(`[repro] ${id}: ${repro.lines} lines, ${what} ${run.seconds.toFixed(1)} s\n`);
  }, frameworks);
  process.stdout.write(`exported scripts of the listed failures: ${reproduced} of ${of} reproduced standalone under torchrun\n`);
}

/** Runs the findings of each framework in `frameworks` (all by default) that imported; sets each record's `findings`. */
async function findings(data: FrameworksData, frameworks?: readonly string[]): Promise<void> {
  const declared = loadFrameworks();
  for (const rec of data.frameworks.filter((f) => (!frameworks || frameworks.includes(f.name)) && f.version !== null)) {
    const fw = declared.get(rec.name);
    if (!fw?.findings.length) continue;
    rec.findings = await runFindings(fw, torchOptionsFromEnv().python);
    for (const f of rec.findings) for (const r of f.runs) process.stderr.write(`[finding] ${rec.name} ${r.label}: exit ${r.exitCode}, ${r.seconds.toFixed(1)} s\n${r.lines.map((l) => `  ${l}\n`).join("")}`);
  }
}

process.exitCode = await main();

/**
 * `npm run frameworks [-- --frameworks a,b] [--out DIR] [--cell-timeout S] [--filter TEXT] [--render-only]`: runs every declared framework
 * (adapters/torch/frameworks/) over the gpu4 matrix and the cpu matrix's distinct shapes on the cpu backend,
 * and writes DIR/frameworks.json (every cell) and DIR/frameworks.md (rendered from it) atomically; DIR
 * defaults to docs/. Needs `npm run setup:torch`. Prints the per-cell cost of the adapter at the end.
 */
import { mkdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { caseKey, formatFrameworksData, renderFrameworks, runFrameworks, type FrameworksData } from "../harness/external/frameworks-table.ts";
import { frameworkCases } from "../matrix/frameworks.ts";
import { loadFrameworks } from "../harness/external/torch/frameworks.ts";
import { PROJECT_ROOT } from "../harness/external/torch/options.ts";
import { builtinMatrices } from "../matrix/index.ts";

async function main(): Promise<number> {
  let v;
  try {
    v = parseArgs({
      args: process.argv.slice(2),
      options: { frameworks: { type: "string" }, out: { type: "string" }, "cell-timeout": { type: "string" }, filter: { type: "string" }, "render-only": { type: "boolean" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    process.stderr.write(`frameworks: ${(err as Error).message}\nusage: npm run frameworks [-- --frameworks a,b] [--out DIR] [--cell-timeout S] [--filter TEXT] [--render-only]\n`);
    return 2;
  }
  const out = resolve(v.out ?? join(PROJECT_ROOT, "docs"));
  if (v["render-only"]) {
    // After editing a framework file's `explain`: the page again from the committed data, nothing run.
    const data = JSON.parse(readFileSync(join(out, "frameworks.json"), "utf8")) as FrameworksData;
    writeFileAtomic(join(out, "frameworks.json"), formatFrameworksData(data));
    writeFileAtomic(join(out, "frameworks.md"), renderFrameworks(data));
    process.stdout.write(`wrote ${join(out, "frameworks.md")} from ${join(out, "frameworks.json")}\n`);
    return 0;
  }
  const known = [...loadFrameworks().keys()];
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
  const total = cases.length * names.length;
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

process.exitCode = await main();

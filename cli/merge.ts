/**
 * Commands that work from result files (the --json shape) rather than running cells:
 *
 *   clip-parity merge --out FILE FILE...
 *     Merges shards into one file: cells in the order of the files, a cell present in several files
 *     kept once when it is the same (timing aside) and refused (exit 2) when it differs; the summary
 *     is recomputed from the cells. (A cell a matrix lists twice stays twice, as in its own file.)
 *     The same shard given twice (one file twice, or two files holding the same cells) is refused
 *     (exit 2): it would count its cells twice or stand in for a shard that is missing.
 *
 *   clip-parity report --results FILE [--report json,junit,md,html] [--out DIR] [--title TEXT]
 *     Renders reports from a file (e.g. the merged nightly results). Exit 0 once written.
 */
import { realpathSync } from "node:fs";
import { InputError } from "../harness/errors.ts";
import { formatResultFile, readResultFile, summarizeJson } from "../harness/results/schema.ts";
import { mergeResults } from "../harness/results/merge.ts";
import { assertWritableDir, assertWritableFile, humanOutput, writeOutputFile } from "../harness/util/fs.ts";
import { parseReporters, REPORTER_NAMES, writeReports, DEFAULT_OUT_DIR } from "../reports/index.ts";
import { summaryText } from "../reports/common.ts";
import type { SectionResult } from "../harness/results/sections.ts";
import { parseCommand, parseCommandLine, str, type CommandSpec } from "./args.ts";


const mergeSpec: CommandSpec = {
  name: "merge",
  summary: "Merges result files (shards of one run) into one; a cell in several files must be the same in each.",
  flags: { out: { type: "string", value: "FILE", description: "the merged result file", required: true } },
  positionals: "FILE...",
  notes: "exit status: 0 merged, 2 bad input (a file that is not a result file, a cell that differs between files, or the same shard twice)",
};

export const merge = {
  spec: mergeSpec,
  async run(argv: string[]): Promise<number> {
    const { values, positionals } = parseCommandLine(mergeSpec, argv);
    const out = str(values, "out")!;
    if (positionals.length === 0) throw new InputError("merge: no result files given\nusage: clip-parity merge --out FILE FILE...");
    assertWritableFile(out, "--out");
    const inputs = positionals.map((path) => ({ path, data: readResultFile(path), file: realpathSync(path) }));
    const { file, duplicates } = mergeResults(inputs);
    writeOutputFile(out, formatResultFile(file));
    humanOutput(out).write(
      `merged ${inputs.length} file${inputs.length === 1 ? "" : "s"} into ${out}: ${summaryText(file.summary)}` +
        (duplicates ? ` (${duplicates} identical duplicate${duplicates === 1 ? "" : "s"} kept once)` : "") +
        "\n",
    );
    return 0;
  },
};

const reportSpec: CommandSpec = {
  name: "report",
  summary: "Renders reports from a result file (e.g. merged nightly shards).",
  flags: {
    results: { type: "string", value: "FILE", description: "a result file (the --json shape)", required: true },
    report: { type: "string", value: REPORTER_NAMES.join(","), description: "reporters to write", default: REPORTER_NAMES.join(",") },
    out: { type: "string", value: "DIR", description: "output folder", default: DEFAULT_OUT_DIR },
    title: { type: "string", value: "TEXT", description: "the reports' title" },
  },
  notes: "exit status: 0 written, 2 bad input",
};

export const report = {
  spec: reportSpec,
  async run(argv: string[]): Promise<number> {
    const v = parseCommand(reportSpec, argv);
    const reporters = parseReporters(str(v, "report")!);
    const outDir = str(v, "out")!;
    assertWritableDir(outDir, "--out");
    const data = readResultFile(str(v, "results")!);
    const title = str(v, "title");
    const written = await writeReports(reporters, data.cells, summarizeJson(data.cells), outDir, {
      ...(title ? { title } : {}),
      ...(data.catchBy ? { catchBy: data.catchBy } : {}),
      ...(data.sections ? { sections: data.sections as SectionResult[] } : {}),
    });
    for (const p of written) process.stdout.write(`wrote ${p}\n`);
    return 0;
  },
};

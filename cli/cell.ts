/** `clip-parity cell`: one cell from flags (or a fuzz case file), through the same runner as `run`. */
import { InputError } from "../harness/errors.ts";
import { runMatrix } from "../harness/run/runner.ts";
import { DEFAULT_LIMITS, parseBackend } from "../harness/run/policy.ts";
import { DEFAULT_TIMEOUT_MS } from "../harness/sandbox/pool.ts";
import type { Case } from "../harness/cell/cell.ts";
import { summaryLine } from "../harness/results/summary.ts";
import { jsonReport } from "../harness/results/json.ts";
import { assertWritableDir, assertWritableFile, humanOutput, writeOutputFile } from "../harness/util/fs.ts";
import { applyWith, EXIT_STATUS, givenFlags, WITH_FLAG, withPinsOf, parseCommand, parseInteger, str, type CommandSpec } from "./args.ts";
import { memoryTable, printCell } from "./print.ts";
import { caseFromFlags, cellFlagSpecs } from "./cell-flags.ts";
import { loadRegressions, regressionCase, regressionRepro } from "../matrix/regressions.ts";

export const spec: CommandSpec = {
  name: "cell",
  summary: "Runs one cell and prints every check, the time per phase and the memory per rank.",
  flags: {
    subject: { type: "string", value: "NAME|PATH", description: "a built-in subject, a module path or torch:<module>:<function>", requiredUnless: ["file", "regression"] },
    ...cellFlagSpecs(["file", "regression"]),
    backend: { type: "string", value: "cpu|cuda|meta", description: "backend", default: "cpu" },
    json: { type: "string", value: "FILE", description: "write the result as JSON" },
    dump: { type: "string", value: "DIR", description: "write the cell's tensors as safetensors (gradients, reference, subject)" },
    file: { type: "string", value: "FUZZ_CASE.json", description: "replay a counterexample written by npm run fuzz (only --subject may be given with it)" },
    regression: { type: "string", value: "N", description: "run regression cell N of matrix/regressions.json, as a whole run's regression section does (with --subject; default the subject it was kept for)" },
    "timeout-s": { type: "string", value: "S", description: "wall-clock limit in seconds", default: String(DEFAULT_TIMEOUT_MS / 1000) },
    "max-world": { type: "string", value: "N", description: "refuse a layout of more ranks", default: String(DEFAULT_LIMITS.maxWorld) },
    with: WITH_FLAG,
  },
  notes: EXIT_STATUS,
};

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const caseFile = str(v, "file");
  if (caseFile !== undefined) {
    const other = givenFlags(v).filter((f) => f !== "file" && f !== "subject");
    if (other.length) throw new InputError(`--file: the case file fixes the cell; only --subject may be given with it (got --${other.join(", --")})`);
    const { printReplay } = await import("../harness/fuzz/replay.ts");
    return printReplay(caseFile, { subject: str(v, "subject"), memoryTable });
  }
  const regression = str(v, "regression");
  if (regression !== undefined) {
    const other = givenFlags(v).filter((f) => f !== "regression" && f !== "subject");
    if (other.length) throw new InputError(`--regression: the regression cell fixes the cell; only --subject may be given with it (got --${other.join(", --")})`);
    const all = loadRegressions();
    const n = parseInteger(regression, "--regression", { min: 0, max: all.length - 1 });
    const subject = str(v, "subject") ?? all[n]!.catches.subject;
    const { printRegression } = await import("../harness/fuzz/replay.ts");
    return printRegression(regressionCase(all[n]!, subject), `regression ${n}, matrix/regressions.json`, regressionRepro(n, subject), { memoryTable });
  }
  const c: Case = caseFromFlags(v, "cell", "--file");
  const [subject] = applyWith([str(v, "subject")!], withPinsOf(v));
  const jsonPath = str(v, "json");
  if (jsonPath !== undefined) assertWritableFile(jsonPath, "--json");
  const dumpDir = str(v, "dump");
  if (dumpDir !== undefined) assertWritableDir(dumpDir, "--dump");
  const output = await runMatrix(
    { name: "cell", description: "one cell from the command line", backend: "cpu", cases: [c], subjects: [subject] },
    {
      backend: parseBackend(str(v, "backend")!),
      golden: "off",
      dumpDir,
      timeoutMs: parseInteger(str(v, "timeout-s")!, "--timeout-s", { min: 1, max: 86_400 }) * 1000,
      limits: { maxWorld: parseInteger(str(v, "max-world")!, "--max-world", { min: 1 }) },
    },
  );
  const result = output.results[0]!;
  printCell(result, humanOutput(jsonPath));
  humanOutput(jsonPath).write(`${summaryLine(output.summary)}\n`);
  if (jsonPath) writeOutputFile(jsonPath, JSON.stringify(jsonReport(output.results, output.summary, output.catchBy), null, 2) + "\n");
  return output.summary.failed ? 1 : 0;
}

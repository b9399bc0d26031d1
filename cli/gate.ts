/**
 * `clip-parity gate --baseline FILE --results FILE [--memory-slack 5%] [--comm-slack 0%]`
 *
 * Compares tonight's results with a baseline (both the --json shape) and fails the night (exit 1) on:
 *   - a new failure: a check that passed or was skipped in the baseline and fails now (cell, check, message);
 *   - a check that passed in the baseline and is now skipped or missing from its cell (a check that no
 *     longer runs proves nothing, so it cannot keep its pass);
 *   - a cell of the baseline that is missing from the results;
 *   - a rank's scratch peak above the baseline's by more than the memory slack;
 *   - a rank's collective count above the baseline's by more than the comm slack (default 0: counts
 *     are exact, any extra collective is a regression).
 *   - nothing judged: no check ran in the cells the two files share (empty results, every check skipped,
 *     or a baseline without those cells), so "no regression" would be a verdict over nothing.
 * Prints a Markdown verdict (for $GITHUB_STEP_SUMMARY), every text from the files escaped; exit 0 with
 * "no regression" otherwise. New cells, fixed failures and improvements are listed as information.
 * Bad files: exit 2.
 */
import { InputError } from "../harness/errors.ts";
import { readResultFile } from "../harness/results/schema.ts";
import { compareResults, DEFAULT_SLACK, gateFailed, pct, type GateOptions, type GateResult, type RegressionKind } from "../harness/results/compare.ts";
import { assertWritableFile, writeOutputFile } from "../harness/util/fs.ts";
import { mdCell, mdCode, mdText } from "../reports/escape.ts";
import { parseCommand, str, type CommandSpec } from "./args.ts";

/** "5%" -> 0.05, "0.05" -> 0.05; a bare number above 1 is refused as ambiguous. */
export function parseSlack(text: string, flagName: string): number {
  const t = text.trim();
  const pct = /^(\d+(?:\.\d+)?)\s*%$/.exec(t);
  if (pct) return Number(pct[1]) / 100;
  if (/^\d+(?:\.\d+)?$/.test(t)) {
    const x = Number(t);
    if (x <= 1) return x;
    throw new InputError(`${flagName}: "${text}" is ambiguous; write a percentage such as "${t}%" or a fraction at most 1 such as 0.05`);
  }
  throw new InputError(`${flagName}: "${text}" is not a percentage (e.g. 5%) or a fraction (e.g. 0.05)`);
}

const KIND_TITLE: Record<RegressionKind, string> = {
  "new-failure": "new failure",
  "now-skipped": "check now skipped",
  "missing-check": "check missing",
  disappeared: "disappeared cell",
  memory: "scratch peak above baseline",
  collectives: "collectives above baseline",
};


/** The results' own state beside the comparison: a gate with no regression over failing cells is not a green run. */
function cellsState(r: GateResult): string {
  const parts = [
    r.failingCells ? `${r.failingCells} cell${r.failingCells === 1 ? "" : "s"} failing` : "",
    r.failingSections ? `${r.failingSections} section${r.failingSections === 1 ? "" : "s"} failing` : "",
  ].filter(Boolean);
  return parts.length ? `${parts.join(", ")} in the results` : "every cell of the results passes (known-bad subjects aside)";
}

/** The headline says both: regressions against the baseline, and the results' own failures; the tick only when both are clean. */
function headline(r: GateResult): string {
  const n = r.regressions.length;
  if (r.judged === 0) return `## clip-parity gate: ⛔ NO VERDICT: nothing was judged${n ? ` (and ${n} regression${n === 1 ? "" : "s"})` : ""}`;
  if (n) return `## clip-parity gate: ❌ ${n} regression${n === 1 ? "" : "s"}; ${cellsState(r)}`;
  const clean = r.failingCells === 0 && r.failingSections === 0;
  return clean ? `## clip-parity gate: ✅ no regression; ${cellsState(r)}` : `## clip-parity gate: ⚠️ no regression, but ${cellsState(r)} (not regressions: the baseline fails them too or does not hold them)`;
}

/** Why nothing was judged, in the words of the files. */
function nothingJudged(r: GateResult, baselinePath: string, resultsPath: string): string {
  const where = r.compared === 0 ? `no cell of ${mdCode(resultsPath)} is in ${mdCode(baselinePath)}` : `no check ran in the ${r.compared} cells both files hold (every check skipped, or none)`;
  return `Nothing was judged: ${where}; a comparison of nothing cannot pass the gate.`;
}

export function renderVerdict(r: GateResult, baselinePath: string, resultsPath: string, options: GateOptions, maxRows = 200): string {
  const out: string[] = [headline(r), ""];
  const slack = `(memory slack ${pct(options.memorySlack)}, comm slack ${pct(options.commSlack)})`;
  const comparedText = `${r.compared} cells of ${mdCode(baselinePath)} compared with ${mdCode(resultsPath)} ${slack}.`;
  if (r.judged === 0) out.push(nothingJudged(r, baselinePath, resultsPath), "");
  if (r.regressions.length === 0) {
    out.push(comparedText, "");
  } else {
    const kinds = new Map<RegressionKind, number>();
    for (const x of r.regressions) kinds.set(x.kind, (kinds.get(x.kind) ?? 0) + 1);
    out.push(`${[...kinds].map(([k, n]) => `${n} ${KIND_TITLE[k]}${n === 1 ? "" : "s"}`).join(", ")}; ${comparedText}`, "");
    out.push(`| regression | cell | check / rank | what |`, `|---|---|---|---|`);
    for (const x of r.regressions.slice(0, maxRows)) out.push(`| ${KIND_TITLE[x.kind]} | ${mdCode(x.cell, { table: true })} | ${mdCell(x.where)} | ${mdCell(x.message)} |`);
    if (r.regressions.length > maxRows) out.push("", `… and ${r.regressions.length - maxRows} more.`);
    out.push("");
  }
  for (const n of r.notes) out.push(`- ${mdText(n)}`);
  if (r.notes.length) out.push("");
  return out.join("\n");
}

export const spec: CommandSpec = {
  name: "gate",
  summary: "Compares tonight's results with a baseline (both the --json shape) and fails on any regression.",
  flags: {
    baseline: { type: "string", value: "FILE", description: "the baseline result file", required: true },
    results: { type: "string", value: "FILE", description: "this run's result file", required: true },
    "memory-slack": { type: "string", value: "PCT", description: "allowed scratch growth, e.g. 5% or 0.05", default: DEFAULT_SLACK.memory },
    "comm-slack": { type: "string", value: "PCT", description: "allowed growth of collective counts", default: DEFAULT_SLACK.comm },
    md: { type: "string", value: "FILE", description: "also write the Markdown verdict here ($GITHUB_STEP_SUMMARY)" },
  },
  notes: "exit status: 0 no regression, 1 a regression or nothing judged (no check ran), 2 bad input",
};

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const baselinePath = str(v, "baseline")!;
  const resultsPath = str(v, "results")!;
  const options: GateOptions = {
    memorySlack: parseSlack(str(v, "memory-slack")!, "--memory-slack"),
    commSlack: parseSlack(str(v, "comm-slack")!, "--comm-slack"),
  };
  const md = str(v, "md");
  if (md !== undefined) assertWritableFile(md, "--md");
  const baseline = readResultFile(baselinePath);
  const results = readResultFile(resultsPath);
  const verdict = compareResults(baseline, results, options);
  const text = renderVerdict(verdict, baselinePath, resultsPath, options);
  if (md !== "-") process.stdout.write(text); // `--md -` is the same text once
  if (md) writeOutputFile(md, text);
  return gateFailed(verdict) ? 1 : 0;
}

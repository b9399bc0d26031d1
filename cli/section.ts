/**
 * A matrix's resume or train section (`clip-parity resume --matrix NAME`, `clip-parity train --matrix
 * NAME`): every case run in a worker of the pool against its expectation (a known-bad case must fail its
 * check), one line per case, exit 1 when any expectation is not met (harness/sandbox/isolated.ts decides).
 */
import type { CheckResult } from "../harness/checks/types.ts";
import { InputError } from "../harness/errors.ts";
import { sectionsFailed, sectionTitle, type SectionResult } from "../harness/results/sections.ts";
import { expectationMet, sectionCheck, type Isolated } from "../harness/sandbox/isolated.ts";
import { humanOutput, STDOUT_PATH, toJsonText, writeOutputFile } from "../harness/util/fs.ts";

export interface SectionRun<C, R> {
  kind: "resume" | "train" | "regression";
  matrix: string;
  cases: readonly C[];
  /** Matrices that have such a section, for the message when `matrix` has none. */
  sections: readonly string[];
  /** Runs every case (isolated), results in case order. */
  runAll(cases: readonly C[]): Promise<Isolated<R>[]>;
  idOf(c: C): string;
  /** The one check that judges a case's result. */
  checkOf(r: R): CheckResult;
  /** The subject every case ran with, when the section was run for one. */
  subject?: string;
  /** Where the lines per case go (default stdout; stderr when the JSON goes to stdout). */
  out?: NodeJS.WritableStream;
  /** Shows that the section is running while its cases run (they report only once all have). */
  progress?: SectionProgress;
}

/** Where a section's text goes and how its running is shown: what `run` hands each section it runs. */
export interface SectionIO {
  out?: NodeJS.WritableStream;
  progress?: SectionProgress;
}

/** Called when a section starts; returns what to call when it ends. */
export type SectionProgress = (title: string, cases: number) => () => void;

/**
 * A section's progress on a stream: a line when it starts, its elapsed time every `everyMs` (in place on
 * a terminal), and how long it took, so that no section runs silent.
 */
export function sectionProgress(stream: NodeJS.WriteStream, everyMs = 5000, now = () => performance.now()): SectionProgress {
  return (title, cases) => {
    const started = now();
    const tty = Boolean(stream.isTTY);
    const say = (text: string, end = false) => stream.write(tty ? `\r\x1b[2K${text}${end ? "\n" : ""}` : `${text}\n`);
    const elapsed = () => `${((now() - started) / 1000).toFixed(0)}s`;
    say(`${title}: ${cases} cases running...`);
    const timer = setInterval(() => say(`${title}: ${cases} cases running, ${elapsed()} elapsed`), everyMs);
    timer.unref();
    return () => {
      clearInterval(timer);
      say(`${title}: ${cases} cases done in ${elapsed()}`, true);
    };
  };
}

/** Runs a section for its exit status alone: 1 when an expectation was not met. */
export async function runExpectedSection<C extends { expect: "pass" | "fail" }, R extends { id: string; durationMs: number }>(
  s: SectionRun<C, R>,
  jsonPath: string | undefined,
): Promise<number> {
  return sectionExitCode(await runSection(s, jsonPath));
}

export function sectionExitCode(s: SectionResult): number {
  return sectionsFailed([s]) ? 1 : 0;
}

/** Runs a section, prints the cases not as expected (each with its check's message) and a count, and returns every case's verdict (for result files and reports). */
export async function runSection<C extends { expect: "pass" | "fail" }, R extends { id: string; durationMs: number }>(
  s: SectionRun<C, R>,
  jsonPath: string | undefined,
): Promise<SectionResult> {
  if (s.cases.length === 0) throw new InputError(`--matrix: "${s.matrix}" has no ${s.kind} section (matrices with one: ${s.sections.join(", ")})`);
  const out = s.out ?? (jsonPath === STDOUT_PATH ? process.stderr : process.stdout);
  const done = s.progress?.(sectionTitle(s), s.cases.length);
  let outcomes: Awaited<ReturnType<typeof s.runAll>>;
  try {
    outcomes = await s.runAll(s.cases);
  } finally {
    done?.();
  }
  const checks: CheckResult[] = [];
  const section: SectionResult = { kind: s.kind, matrix: s.matrix, ...(s.subject !== undefined ? { subject: s.subject } : {}), cases: [] };
  let wrong = 0;
  s.cases.forEach((c, i) => {
    const o = outcomes[i]!;
    const check = sectionCheck(o.result && s.checkOf(o.result), o.fault);
    checks.push(check);
    const met = expectationMet(c.expect, check);
    if (!met) wrong++;
    const id = o.result?.id ?? s.idOf(c);
    section.cases.push({ id, expect: c.expect, check: check.id, status: check.status, message: check.message, met, ...(o.result ? { durationMs: Math.round(o.result.durationMs) } : {}) });
    // a case as expected is one of the count below; only one that is not gets its lines
    if (met) return;
    const seconds = o.result ? `  ${(o.result.durationMs / 1000).toFixed(1)} s` : "";
    out.write(`FAIL ${check.status.padEnd(4)} (expected ${c.expect}) ${id}${seconds}\n`);
    out.write(`     ${check.id}: ${check.message.replace(/\n/g, "\n     ")}\n`);
  });
  out.write(`${s.cases.length} ${s.kind} cells: ${s.cases.length - wrong} as expected, ${wrong} not\n`);
  if (jsonPath) {
    const count = (status: string) => checks.filter((k) => k.status === status).length;
    const [passed, failed] = [count("pass"), count("fail")];
    const results = outcomes.map((o, i) => o.result ?? { id: s.idOf(s.cases[i]!), check: checks[i] });
    writeOutputFile(jsonPath, toJsonText({ kind: s.kind, matrix: s.matrix, results, summary: { cells: results.length, passed, failed, skipped: results.length - passed - failed, unexpected: wrong } }));
  }
  return section;
}

/**
 * One train or resume case run by its flags (`clip-parity train --layouts ...`, `clip-parity resume --layout
 * ...`): its lines, its JSON file (one result and the summary `run` writes) and its exit status, or the
 * isolation fault that kept its subject from handing a result back.
 */
export function finishOneCase<R extends object>(
  kind: "train" | "resume",
  id: string,
  o: Isolated<R>,
  jsonPath: string | undefined,
  print: (r: R, out: NodeJS.WritableStream) => void,
  checksOf: (r: R) => readonly CheckResult[],
  faultJson: (check: CheckResult) => object,
): number {
  const out = humanOutput(jsonPath);
  if (!o.result || o.fault !== null) {
    out.write(`${id}\n  fail isolation: ${o.fault}\n`);
    if (jsonPath) writeOutputFile(jsonPath, toJsonText({ kind, results: [faultJson(sectionCheck(undefined, o.fault))], summary: { cells: 1, passed: 0, failed: 1, skipped: 0 } }));
    return 1;
  }
  print(o.result, out);
  const checks = checksOf(o.result);
  const failed = checks.some((c) => c.status === "fail");
  const passed = !failed && checks.every((c) => c.status === "pass");
  if (jsonPath) writeOutputFile(jsonPath, toJsonText({ kind, results: [o.result], summary: { cells: 1, passed: passed ? 1 : 0, failed: failed ? 1 : 0, skipped: failed || passed ? 0 : 1 } }));
  return failed ? 1 : 0;
}


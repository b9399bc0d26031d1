/**
 * A matrix's resume or train section (`clip-parity resume --matrix NAME`, `clip-parity train --matrix
 * NAME`): every case run in a worker of the pool against its expectation (a known-bad case must fail its
 * check), one line per case, exit 1 when any expectation is not met (harness/run/isolated.ts decides).
 */
import type { CheckResult } from "../harness/checks/types.ts";
import { InputError } from "../harness/errors.ts";
import { expectationMet, sectionCheck, type Isolated } from "../harness/run/isolated.ts";
import { writeJsonAtomic } from "../harness/util/fs.ts";

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
}

export async function runExpectedSection<C extends { expect: "pass" | "fail" }, R extends { id: string; durationMs: number }>(
  s: SectionRun<C, R>,
  jsonPath: string | undefined,
): Promise<number> {
  if (s.cases.length === 0) throw new InputError(`--matrix: "${s.matrix}" has no ${s.kind} section (matrices with one: ${s.sections.join(", ")})`);
  const out = process.stdout;
  const outcomes = await s.runAll(s.cases);
  const checks: CheckResult[] = [];
  let wrong = 0;
  s.cases.forEach((c, i) => {
    const o = outcomes[i]!;
    const check = sectionCheck(o.result && s.checkOf(o.result), o.fault);
    checks.push(check);
    const met = expectationMet(c.expect, check);
    if (!met) wrong++;
    const seconds = o.result ? `  ${(o.result.durationMs / 1000).toFixed(1)} s` : "";
    out.write(`${met ? "ok  " : "FAIL"} ${check.status.padEnd(4)} (expected ${c.expect}) ${o.result?.id ?? s.idOf(c)}${seconds}\n`);
    if (!met) out.write(`     ${check.id}: ${check.message.replace(/\n/g, "\n     ")}\n`);
  });
  out.write(`${s.cases.length} ${s.kind} cells: ${s.cases.length - wrong} as expected, ${wrong} not\n`);
  if (jsonPath) {
    const count = (status: string) => checks.filter((k) => k.status === status).length;
    const [passed, failed] = [count("pass"), count("fail")];
    const results = outcomes.map((o, i) => o.result ?? { id: s.idOf(s.cases[i]!), check: checks[i] });
    writeJsonAtomic(jsonPath, { kind: s.kind, matrix: s.matrix, results, summary: { cells: results.length, passed, failed, skipped: results.length - passed - failed, unexpected: wrong } });
  }
  return wrong ? 1 : 0;
}

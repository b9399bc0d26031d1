/**
 * A matrix's resume or train section (`clip-parity resume --matrix NAME`, `clip-parity train --matrix
 * NAME`): every case run against its expectation (a known-bad case must fail its check), one line per
 * case, exit 1 when any expectation is not met.
 */
import type { CheckResult } from "../harness/checks/types.ts";
import { InputError } from "../harness/errors.ts";
import { writeJsonAtomic } from "../harness/util/fs.ts";

export interface SectionRun<C, R> {
  kind: "resume" | "train";
  matrix: string;
  cases: readonly C[];
  /** Matrices that have such a section, for the message when `matrix` has none. */
  sections: readonly string[];
  run(c: C): Promise<R>;
  /** The one check that judges a case's result. */
  checkOf(r: R): CheckResult;
}

export async function runExpectedSection<C extends { expect: "pass" | "fail" }, R extends { id: string; durationMs: number }>(
  s: SectionRun<C, R>,
  jsonPath: string | undefined,
): Promise<number> {
  if (s.cases.length === 0) throw new InputError(`--matrix: "${s.matrix}" has no ${s.kind} section (matrices with one: ${s.sections.join(", ")})`);
  const out = process.stdout;
  const results: R[] = [];
  let wrong = 0;
  for (const c of s.cases) {
    const r = await s.run(c);
    results.push(r);
    const check = s.checkOf(r);
    const met = c.expect === "pass" ? check.status !== "fail" : check.status === "fail";
    if (!met) wrong++;
    out.write(`${met ? "ok  " : "FAIL"} ${check.status.padEnd(4)} (expected ${c.expect}) ${r.id}  ${(r.durationMs / 1000).toFixed(1)} s\n`);
    if (!met) out.write(`     ${check.message.replace(/\n/g, "\n     ")}\n`);
  }
  out.write(`${s.cases.length} ${s.kind} cells: ${s.cases.length - wrong} as expected, ${wrong} not\n`);
  if (jsonPath) {
    const count = (status: string) => results.filter((r) => s.checkOf(r).status === status).length;
    const [passed, failed] = [count("pass"), count("fail")];
    writeJsonAtomic(jsonPath, { kind: s.kind, matrix: s.matrix, results, summary: { cells: results.length, passed, failed, skipped: results.length - passed - failed, unexpected: wrong } });
  }
  return wrong ? 1 : 0;
}

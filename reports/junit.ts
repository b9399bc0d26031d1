/**
 * JUnit XML, as CI systems read it (the Jenkins/Surefire schema's required fields): one <testsuite> per
 * subject, one <testcase> per cell (classname = the subject, name = the cell id), a failing cell's
 * <failure> naming its failing checks in the message attribute and carrying each one's full message as
 * text; a cell in which every check skipped is <skipped> with the reasons. A run in which no check ran
 * gets one <testcase> with an <error>, so that a CI page never shows it green. A known-bad subject's failing
 * cells (meta.catchBy) are expected: passed testcases with an expected-failure property naming the checks,
 * so that CI shows them green; its suite has one more testcase, "caught by <its checks>", that fails when
 * none of them caught it. The run's regression, train
 * and resume sections follow, a <testsuite> each (sectionSuite).
 */
import type { RunSummary } from "../harness/results/types.ts";
import { declaredCatchBy, describeRun, NOTHING_JUDGED, runVerdict, summaryText, VERDICT_TEXT, type ReportMeta } from "./common.ts";
import { firstLine } from "../harness/results/text.ts";
import { failureDigest, missedText } from "./groups.ts";
import type { CellJson } from "../harness/results/schema.ts";
import { sectionCounts, sectionTitle, type SectionResult } from "../harness/results/sections.ts";

/** Characters XML 1.0 cannot carry at all (most C0 controls, lone surrogates, U+FFFE/U+FFFF). */
const INVALID_XML = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** Escapes text for an XML attribute or element; invalid characters become U+FFFD. */
export function xmlEscape(text: string): string {
  return text
    .replace(INVALID_XML, "\uFFFD")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&apos;");
}

/** For attributes: newlines and tabs as character references, so parsers keep them. */
function attr(text: string): string {
  return xmlEscape(text).replace(/\n/g, "&#10;").replace(/\r/g, "&#13;").replace(/\t/g, "&#9;");
}

/** The suite that stands for a run nothing judged: zero tests would read as success. */
function noVerdictSuite(summary: RunSummary): string {
  const message = VERDICT_TEXT.none;
  return (
    `  <testsuite name="clip-parity" tests="1" failures="0" errors="1" skipped="0" time="0.000">\n` +
    `    <testcase name="verdict" classname="clip-parity" time="0.000">\n` +
    `      <error message="${attr(message)}" type="no-verdict">${xmlEscape(`${NOTHING_JUDGED}: ${summaryText(summary)}`)}</error>\n` +
    `    </testcase>\n  </testsuite>`
  );
}

/**
 * A section (regression, train, resume) as one <testsuite>, a <testcase> per case (classname the section's
 * kind): an expectation not met is a <failure>; a known-bad case that failed as it must is a pass with the
 * property expected=fail, so that CI shows it green and a reader still sees why.
 */
function sectionSuite(s: SectionResult): { xml: string; tests: number; failures: number; time: number } {
  let time = 0;
  const cases = s.cases.map((c) => {
    const t = (c.durationMs ?? 0) / 1000;
    time += t;
    const open = `    <testcase name="${attr(c.id)}" classname="${attr(`${s.kind}${s.subject ? ` ${s.subject}` : ""}`)}" time="${t.toFixed(3)}"`;
    if (!c.met) {
      const message = `expected ${c.expect}, got ${c.check} ${c.status}${c.message ? `: ${firstLine(c.message)}` : ""}`;
      return `${open}>\n      <failure message="${attr(message)}" type="${attr(c.check)}">${xmlEscape(c.message)}</failure>\n    </testcase>`;
    }
    if (c.expect === "fail") {
      return `${open}>\n      <properties><property name="expected" value="${attr(`fail: ${c.check} caught a known-bad case`)}"/></properties>\n    </testcase>`;
    }
    return `${open}/>`;
  });
  const n = sectionCounts(s);
  const xml =
    `  <testsuite name="${attr(sectionTitle(s))}" tests="${n.cases}" failures="${n.unexpected}" errors="0" skipped="0" time="${time.toFixed(3)}">\n` +
    (cases.length ? cases.join("\n") + "\n" : "") +
    `  </testsuite>`;
  return { xml, tests: n.cases, failures: n.unexpected, time };
}

export function renderJunit(cells: readonly CellJson[], summary: RunSummary, meta: ReportMeta = {}): string {
  const bySubject = new Map<string, CellJson[]>();
  for (const c of cells) bySubject.set(c.subject, [...(bySubject.get(c.subject) ?? []), c]);
  const suites: string[] = [];
  const total = { tests: 0, failures: 0, errors: 0, skipped: 0, time: 0 };
  for (const [subject, list] of bySubject) {
    const cases: string[] = [];
    const n = { tests: 0, failures: 0, skipped: 0, time: 0 };
    for (const cell of list) {
      n.tests++;
      const time = (cell.durationMs ?? 0) / 1000;
      n.time += time;
      const open = `    <testcase name="${attr(cell.id)}" classname="${attr(subject)}" time="${time.toFixed(3)}"`;
      const failed = cell.checks.filter((x) => x.status === "fail");
      const declared = declaredCatchBy(meta.catchBy, subject);
      if (failed.length && declared !== undefined) {
        // a known-bad subject failing is what it is for: green in CI, the checks that caught it kept as a property
        const caught = failed.map((x) => `${x.id}${declared.includes(x.id) ? "" : " (not in its catchBy)"}: ${firstLine(x.message)}`).join("; ");
        cases.push(`${open}>\n      <properties><property name="expected-failure" value="${attr(caught)}"/></properties>\n    </testcase>`);
      } else if (failed.length) {
        n.failures++;
        const message = failed.map((x) => `${x.id}: ${firstLine(x.message)}`).join("; ");
        const text = failed.map((x) => `${x.id}: ${x.message}`).join("\n\n");
        cases.push(`${open}>\n      <failure message="${attr(message)}" type="${attr(failed.map((x) => x.id).join(","))}">${xmlEscape(text)}</failure>\n    </testcase>`);
      } else if (cell.checks.every((x) => x.status === "skip")) {
        n.skipped++;
        const reasons = cell.checks.map((x) => `${x.id}: ${x.message}`).join("\n");
        cases.push(`${open}>\n      <skipped message="${attr(reasons || "no check ran")}"/>\n    </testcase>`);
      } else {
        cases.push(`${open}/>`);
      }
    }
    const ownCatchBy = declaredCatchBy(meta.catchBy, subject);
    const missed = ownCatchBy === undefined ? undefined : failureDigest(list, meta.catchBy).missed[0];
    if (ownCatchBy !== undefined) {
      // the one test a known-bad subject can fail: none of the checks it declares caught it
      n.tests++;
      const open = `    <testcase name="${attr(`caught by ${ownCatchBy.join(" or ")}`)}" classname="${attr(subject)}" time="0.000"`;
      if (missed) {
        n.failures++;
        cases.push(`${open}>\n      <failure message="${attr(missedText(missed))}" type="missed"/>\n    </testcase>`);
      } else cases.push(`${open}/>`);
    }
    total.tests += n.tests;
    total.failures += n.failures;
    total.skipped += n.skipped;
    total.time += n.time;
    suites.push(
      `  <testsuite name="${attr(subject)}" tests="${n.tests}" failures="${n.failures}" errors="0" skipped="${n.skipped}" time="${n.time.toFixed(3)}">\n` +
        (cases.length ? cases.join("\n") + "\n" : "") +
        `  </testsuite>`,
    );
  }
  for (const section of meta.sections ?? []) {
    const x = sectionSuite(section);
    suites.push(x.xml);
    total.tests += x.tests;
    total.failures += x.failures;
    total.time += x.time;
  }
  if (runVerdict(cells, summary, meta.sections) === "none") {
    suites.push(noVerdictSuite(summary));
    total.tests++;
    total.errors++;
  }
  const name = ["clip-parity", describeRun(meta)].filter(Boolean).join(" ");
  return (
    `<?xml version="1.0" encoding="UTF-8"?>\n` +
    `<testsuites name="${attr(name)}" tests="${total.tests}" failures="${total.failures}" errors="${total.errors}" skipped="${total.skipped}" time="${total.time.toFixed(3)}">\n` +
    (suites.length ? suites.join("\n") + "\n" : "") +
    `</testsuites>\n`
  );
}

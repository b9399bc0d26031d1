/**
 * Failures grouped by subject and check, what a person reads before any single cell: many failing cells
 * that repeat a few messages are a few groups. Every reporter that lists failures groups them here, so the
 * HTML page, the Markdown summary and the tests count the same groups.
 *
 * A subject that declares `catchBy` (a known-bad subject) is expected to fail: its groups are kept apart
 * from the unexpected ones, each marked with whether its check is one the subject declares. A known-bad
 * subject that none of its declared checks caught is an unexpected result and is listed as "missed".
 */
import type { CellJson } from "../harness/results/schema.ts";
import { declaredCatchBy, failedChecks, type CatchBy } from "./common.ts";
import { messageBody } from "../harness/results/text.ts";

export interface FailureGroup {
  subject: string;
  check: string;
  /** unexpected: a subject meant to pass; declared: a known-bad subject caught by a check it names; also: another check of a known-bad subject. */
  kind: "unexpected" | "declared" | "also";
  /** The subject's declared catchBy (empty for a subject meant to pass). */
  catchBy: readonly string[];
  /** The cells in which this check failed, in run order. */
  cells: CellJson[];
  /** The first cell's message, without its reproduce line. */
  firstMessage: string;
  /** One message per distinct shape (numbers aside), first seen first; at least the first message. */
  messages: string[];
}

export interface MissedCatch {
  subject: string;
  /** The checks it declares, none of which failed. */
  catchBy: readonly string[];
  cells: number;
}

export interface FailureDigest {
  unexpected: FailureGroup[];
  /** Groups of known-bad subjects: declared ones first within each subject. */
  expected: FailureGroup[];
  missed: MissedCatch[];
  /** Failing (cell, check) pairs; the groups' cell counts add up to it. */
  pairs: number;
  failingCells: number;
}

/** A message with its numbers (values, ulps, ranks, sizes) blanked: two cells "differ beyond numbers" when these differ. */
export function messageShape(message: string): string {
  return messageBody(message)
    .replace(/[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?/gi, "#")
    .replace(/\b(?:nan|inf(?:inity)?)\b/gi, "#")
    // 12,718,080 bytes and rank(s) 1,2,3 are one number each, however many digits or ranks
    .replace(/#(?:\s*,\s*#)+/g, "#")
    .replace(/\s+/g, " ")
    .trim();
}

export function failureDigest(cells: readonly CellJson[], catchBy: CatchBy = {}): FailureDigest {
  const groups = new Map<string, FailureGroup & { shapes: Set<string> }>();
  const ran = new Map<string, number>();
  let pairs = 0;
  let failingCells = 0;
  for (const c of cells) {
    ran.set(c.subject, (ran.get(c.subject) ?? 0) + 1);
    const failed = failedChecks(c);
    if (failed.length) failingCells++;
    for (const x of failed) {
      pairs++;
      const key = `${c.subject}\u0000${x.id}`;
      let g = groups.get(key);
      if (!g) {
        const declared = declaredCatchBy(catchBy, c.subject);
        const kind = declared === undefined ? "unexpected" : declared.includes(x.id) ? "declared" : "also";
        g = { subject: c.subject, check: x.id, kind, catchBy: declared ?? [], cells: [], firstMessage: messageBody(x.message), messages: [], shapes: new Set() };
        groups.set(key, g);
      }
      g.cells.push(c);
      const shape = messageShape(x.message);
      if (!g.shapes.has(shape)) {
        g.shapes.add(shape);
        g.messages.push(messageBody(x.message));
      }
    }
  }
  const all = [...groups.values()].map(({ shapes: _s, ...g }) => g);
  const rank = { declared: 0, also: 1, unexpected: 0 } as const;
  const subjectOrder = [...ran.keys()];
  const expected = all
    .filter((g) => g.kind !== "unexpected")
    .sort((a, b) => subjectOrder.indexOf(a.subject) - subjectOrder.indexOf(b.subject) || rank[a.kind] - rank[b.kind]);
  const missed: MissedCatch[] = [];
  for (const [subject, n] of ran) {
    const declared = declaredCatchBy(catchBy, subject);
    if (declared === undefined) continue;
    if (!all.some((g) => g.subject === subject && g.kind === "declared")) missed.push({ subject, catchBy: declared, cells: n });
  }
  return { unexpected: all.filter((g) => g.kind === "unexpected"), expected, missed, pairs, failingCells };
}

/** The headings of the two lists, worded once for the HTML page and the Markdown summary. */
export function unexpectedHeading(d: FailureDigest): string {
  return `Unexpected failures: ${pairsIn(d.unexpected)} (cell, check) pairs in ${d.unexpected.length} groups`;
}

export function expectedHeading(d: FailureDigest): string {
  return `Known-bad subjects, failing as expected: ${pairsIn(d.expected)} (cell, check) pairs in ${d.expected.length} groups`;
}

function pairsIn(groups: readonly FailureGroup[]): number {
  return groups.reduce((n, g) => n + g.cells.length, 0);
}

/** How a group's kind reads in a report. */
export function groupKindText(g: Pick<FailureGroup, "kind" | "catchBy">): string {
  if (g.kind === "declared") return "expected: a check its catchBy names";
  if (g.kind === "also") return `also failed (catchBy: ${g.catchBy.join(", ")})`;
  return "unexpected";
}

export function missedText(m: MissedCatch): string {
  return `${m.subject} is known-bad (catchBy ${m.catchBy.join(", ")}) but none of those checks failed in its ${m.cells} cells`;
}


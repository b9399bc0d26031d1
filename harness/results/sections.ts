/**
 * The sections a whole `run` judges besides its cells: the matrix's regression cases (every subject),
 * and its train and resume cases (optimizer-owned subjects). Each case has an expectation (a known-bad
 * case must fail its check); a section's verdict is whether every expectation was met. Result files and
 * every report carry them (json.ts `sections`, reports/*), so that a CI job reading out/cpu.json or the
 * JUnit file sees a section's failure as the exit status does.
 */
import type { CheckStatus } from "./types.ts";

export const SECTION_KINDS = ["regression", "train", "resume"] as const;
export type SectionKind = (typeof SECTION_KINDS)[number];

export interface SectionCase {
  id: string;
  expect: "pass" | "fail";
  /** The judging check's id and verdict (an isolation fault is the check "isolation"). */
  check: string;
  status: CheckStatus;
  message: string;
  /** Whether the expectation was met (a skipped check never meets one). */
  met: boolean;
  durationMs?: number;
}

export interface SectionResult {
  kind: SectionKind;
  matrix: string;
  /** The subject the section ran with, when it ran with one (train and resume with an optimizer-owned subject). */
  subject?: string;
  cases: SectionCase[];
}

export interface SectionCounts {
  cases: number;
  asExpected: number;
  unexpected: number;
}

export function sectionCounts(s: Pick<SectionResult, "cases">): SectionCounts {
  const unexpected = s.cases.filter((c) => !c.met).length;
  return { cases: s.cases.length, asExpected: s.cases.length - unexpected, unexpected };
}

/** A section passes when every expectation was met; one with no case judged nothing and is not a pass. */
export function sectionVerdict(s: Pick<SectionResult, "cases">): "pass" | "fail" | "none" {
  if (s.cases.length === 0) return "none";
  return s.cases.every((c) => c.met) ? "pass" : "fail";
}

export function sectionsFailed(sections: readonly Pick<SectionResult, "cases">[] | undefined): boolean {
  return (sections ?? []).some((s) => sectionVerdict(s) === "fail");
}

/** How a section is named in every output: "regression section (cpu)", "train section (cpu, titan-mtp)". */
export function sectionTitle(s: Pick<SectionResult, "kind" | "matrix" | "subject">): string {
  return `${s.kind} section (${s.matrix}${s.subject ? `, ${s.subject}` : ""})`;
}

/** One line per section: its verdict and counts, as the terminal and the reports say it. */
export function sectionSummaryText(s: SectionResult): string {
  const n = sectionCounts(s);
  const verdict = sectionVerdict(s);
  return `${sectionTitle(s)}: ${verdict === "none" ? "NO VERDICT" : verdict.toUpperCase()}: ${n.cases} cases, ${n.asExpected} as expected, ${n.unexpected} not`;
}

/** A section as result files and the JSON report write it: its cases, counts and verdict spelled out for readers. */
export function sectionJson(s: SectionResult) {
  const verdict = sectionVerdict(s);
  return { ...s, summary: sectionCounts(s), verdict: verdict === "none" ? "no verdict" : verdict };
}

/** The `sections` field of a result file: written only when some section ran, so other files are unchanged. */
export function sectionsField(sections: readonly SectionResult[] | undefined): { sections?: ReturnType<typeof sectionJson>[] } {
  return sections && sections.length ? { sections: sections.map(sectionJson) } : {};
}

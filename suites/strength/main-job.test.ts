/**
 * Issue 22: the main job (`clip-parity run --matrix cpu --subject FILE`) fails every bug it has cells for.
 * An optimizer-owned clipper is judged by every section its shape can be judged by: the finalize cells of
 * the cpu matrix, and the train and resume sections run with the subject; the first three subjects below
 * passed the main job on 1275596. Clip-shaped corner bugs are each caught on the cells meant for them
 * (a `norm > max_norm` guard, a `clip_coef < 1` guard on NaN, p truncated, a bucket order taken from the
 * partials, an empty-shard group skipped: the last two by the regression cells a whole run meets), and
 * so are a Partial(sum) gradient taken for a Shard and a copy of every gradient held during the clip.
 * Each subject here has its bug written in the shape a trainer would have it.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { cli } from "../isolation/run-cli.ts";

const S = (name: string) => `./suites/strength/subjects/${name}.ts`;
const BUGS: [string, RegExp][] = [
  ["coef-before-finalize", /finalize/], // the finalize cells and the train section
  ["broadcast-tied", /finalize/],
  ["init-from-last-stage", /^train\//], // the init sync: training alone shows it
  ["init-first-chunk", /^train\//], // the init sync of the first FSDP chunk only
  ["finalize-once", /finalize/], // a flag set by the first clip: from the second clip on
];

describe("the main job fails each optimizer-owned bug", () => {
  it("run --matrix cpu with the five subjects: exit 1, each caught by a cell or a section", { timeout: 900_000 }, async () => {
    const json = join(mkdtempSync(join(tmpdir(), "cp-main-")), "out.json");
    const r = await cli(["run", "--matrix", "cpu", ...BUGS.flatMap(([n]) => ["--subject", S(n)]), "--golden", "off", "--json", json, "--quiet"], 900_000);
    expect(r.code, r.stderr).toBe(1);
    // a user's module is named by its defineSubject name in ids and `subject`, its path in `subjectPath`
    const cells = JSON.parse(readFileSync(json, "utf8")).cells as { id: string; subject: string; subjectPath?: string; checks: { status: string }[] }[];
    for (const [name, where] of BUGS) {
      const failedCells = cells.filter((c) => c.subject === S(name) && c.checks.some((k) => k.status === "fail")).map((c) => c.id);
      const failedSections = r.stdout.split("\n").filter((l) => l.startsWith("FAIL fail (expected pass)") && l.includes(S(name)));
      const caught = [...failedCells, ...failedSections.map((l) => l.replace(/^FAIL fail \(expected pass\) /, ""))];
      expect(caught.length, `${name} passed the main job`).toBeGreaterThan(0);
      expect(caught.some((id) => where.test(id.replace(`${S(name)}/`, "")) || where.test(id)), `${name}: ${caught.slice(0, 3).join("; ")}`).toBe(true);
    }
    expect(r.stdout).toMatch(/is an optimizer-owned clipper: the cpu matrix's train and resume sections run with it/);
  });

  it("run --matrix cpu fails each clip-shaped corner bug on the cells meant for it", { timeout: 900_000 }, async () => {
    const CORNERS: [string, RegExp][] = [
      ["guard-gt-max-norm", /\/boundary-small\//], // max_norm on or just above a small norm
      ["nan-unscaled", /\/n(1|inf|1\.5|3)\/nonfinite-nan\/s0\/noerr$/], // NaN without error at a p other than 2
      ["p-truncated", /\/n1\.5\//],
      ["bucket-order-by-rank", /^regression \d+: .* n(2|1\.5) /], // a finite p: the regression section
      ["skip-empty-bucket", /^regression \d+: /], // no debug-model cell has an empty-shard group
      ["partial-as-shard", /\/llama3-debug-unreduced\//], // a Partial(sum) gradient's partials summed over 2 ranks
      ["copy-every-grad", /\/llama3-debug\//], // a copy of every gradient: memory.peak on any model cell
    ];
    const json = join(mkdtempSync(join(tmpdir(), "cp-main-")), "out.json");
    const r = await cli(["run", "--matrix", "cpu", ...CORNERS.flatMap(([n]) => ["--subject", S(n)]), "--golden", "off", "--json", json, "--quiet"], 900_000);
    expect(r.code, r.stderr).toBe(1);
    // a user's module is named by its defineSubject name in ids and `subject`, its path in `subjectPath`
    const cells = JSON.parse(readFileSync(json, "utf8")).cells as { id: string; subject: string; subjectPath?: string; checks: { status: string }[] }[];
    const regressionFailures = r.stdout.split("\n").filter((l) => l.startsWith("FAIL fail (expected pass) regression ")).map((l) => l.replace(/^FAIL fail \(expected pass\) /, ""));
    for (const [name, where] of CORNERS) {
      const caught = [
        ...cells.filter((c) => c.subjectPath === S(name) && c.checks.some((k) => k.status === "fail")).map((c) => c.id),
        ...regressionFailures.filter((l) => l.includes(` ${S(name)} `) || cells.some((c) => c.subjectPath === S(name) && l.includes(` ${c.subject} `))),
      ];
      expect(caught.some((id) => where.test(id)), `${name} was not caught where it should be: ${caught.slice(0, 3).join("; ") || "nothing failed"}`).toBe(true);
    }
    expect(r.stdout).toMatch(/the cpu matrix's \d+ regression cells \(matrix\/regressions\.json\) run with each subject/);
  });

  it("a filtered run selects cells only: no sections", { timeout: 120_000 }, async () => {
    const r = await cli(["run", "--matrix", "cpu", "--subject", "titan-mtp", "--filter", "/pp4/deepseek-v3-debug/f32/n2/finalize/", "--golden", "off", "--quiet"]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).not.toMatch(/train and resume sections/);
  });

  it("train --matrix and resume --matrix take --subject", { timeout: 300_000 }, async () => {
    const t = await cli(["train", "--matrix", "cpu", "--subject", S("init-from-last-stage")]);
    expect(t.code, t.stdout + t.stderr).toBe(1);
    expect(t.stdout).toMatch(/FAIL fail \(expected pass\) train\/\.\/suites\/strength\/subjects\/init-from-last-stage\.ts\//);
    const bad = await cli(["resume", "--matrix", "cpu", "--subject", "no-such-subject"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/subject "no-such-subject" is not a built-in subject/);
  });
});

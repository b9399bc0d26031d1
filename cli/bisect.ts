/**
 * `clip-parity bisect --subject torch:FW --releases A..B <cell flags | --matrix FILE>`: the releases of FW's package
 * between A and B on the package registry, the verdict of each one run, and the first release whose verdict differs
 * from A's, found by bisection (about log2(n) runs; environments are cached, so a second bisect reuses them).
 * Exit status: 0 a boundary was found, 1 none (B's verdict is A's), 2 bad input.
 */
import { InputError } from "../harness/errors.ts";
import { compareVersions, formatPin, registryVersions, releaseEnvironment, withPins } from "../harness/external/torch/environments.ts";
import { getFramework } from "../harness/external/torch/frameworks.ts";
import { parseTorchSpec } from "../harness/external/torch/subject.ts";
import type { Case, Cell } from "../harness/cell/cell.ts";
import { resolveMatrix } from "../matrix/index.ts";
import { historyRunners } from "./history.ts";
import { applyWith, given, parseCommand, parseInteger, str, WITH_FLAG, withPinsOf, type CommandSpec } from "./args.ts";
import { CELL_FLAG_NAMES, caseFromFlags, cellFlagSpecs } from "./cell-flags.ts";

export const spec: CommandSpec = {
  name: "bisect",
  summary: "Finds the first release of a framework whose verdict on a cell (or a matrix file's cells) differs from the first release's.",
  flags: {
    subject: { type: "string", value: "torch:FW", description: "the torch: subject (a framework of adapters/torch/frameworks/, or torch:<module>:<function>)", required: true },
    releases: { type: "string", value: "A..B", description: "the first and last release to consider, both on the registry (e.g. 0.19.0..0.19.8)", required: true },
    package: { type: "string", value: "PKG", description: "the package whose releases are bisected (default: the framework's; torch for torch:<module>:<function>)" },
    matrix: { type: "string", value: "FILE", description: "the cells of a matrix file instead of the cell flags" },
    ...cellFlagSpecs(),
    with: { ...WITH_FLAG, description: "other releases held fixed on every side (e.g. torch==2.9.1)" },
    "timeout-s": { type: "string", value: "S", description: "wall-clock limit of one cell, the session start included", default: "600" },
  },
  notes: "exit status: 0 a boundary was found, 1 none (the last release's verdict is the first's), 2 bad input",
};

function casesOf(v: ReturnType<typeof parseCommand>): Case[] {
  if (str(v, "matrix") !== undefined) {
    const extra = CELL_FLAG_NAMES.filter((f) => given(v, f));
    if (extra.length) throw new InputError(`bisect: --matrix gives the cells; --${extra.join(", --")} cannot be given with it`);
    return resolveMatrix(str(v, "matrix")!).cases;
  }
  return [caseFromFlags(v, "bisect", "--matrix FILE")];
}

/** The releases of `pkg` from `a` to `b` inclusive, oldest first; InputError when either end is not a release. */
export function releasesBetween(all: readonly string[], range: string, pkg: string): string[] {
  const [a, b, ...rest] = range.split("..");
  if (!a || !b || rest.length) throw new InputError(`--releases: "${range}" is not A..B (two releases, e.g. 0.19.0..0.19.8)`);
  for (const end of [a, b]) if (!all.includes(end)) throw new InputError(`--releases: ${pkg} ${end} is not a release on the registry (nearest: ${nearest(all, end)})`);
  if (compareVersions(a, b) >= 0) throw new InputError(`--releases: ${a} is not older than ${b}`);
  return all.filter((x) => compareVersions(x, a) >= 0 && compareVersions(x, b) <= 0);
}

const nearest = (all: readonly string[], v: string) => all.filter((x) => x.split(".")[0] === v.split(".")[0]).slice(-5).join(", ") || all.slice(-5).join(", ");

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const subject = str(v, "subject")!;
  const parsed = parseTorchSpec(subject);
  if (parsed.pins.length) throw new InputError(`--subject: "${subject}" pins releases; bisect chooses them (give fixed ones with --with)`);
  const pkg = str(v, "package") ?? (parsed.kind === "framework" ? getFramework(parsed.framework).package : "torch");
  const fixed = withPinsOf(v);
  if (fixed.some((p) => p.name === pkg)) throw new InputError(`--with ${pkg}: the bisected package cannot be held fixed`);
  const cases = casesOf(v);
  const releases = releasesBetween(registryVersions(pkg), str(v, "releases")!, pkg);
  const { load, run: runCells } = historyRunners(parseInteger(str(v, "timeout-s")!, "--timeout-s", { min: 1, max: 86_400 }) * 1000);
  const verdicts = new Map<string, string>();
  const verdict = async (release: string): Promise<string> => {
    const known = verdicts.get(release);
    if (known !== undefined) return known;
    const [spec] = applyWith([withPins(subject, [{ name: pkg, version: release }])], fixed);
    let text: string;
    try {
      const subject = await load(spec!);
      const results = await runCells(cases.map((c): Cell => ({ subject: spec!, ...c }))).finally(() => subject.release && releaseEnvironment(subject.release.dir));
      const failed = [...new Set(results.flatMap((r) => r.checks.filter((c) => c.status === "fail").map((c) => c.id)))];
      text = failed.length ? `fail ${failed.join(", ")}` : results.some((r) => r.checks.some((c) => c.status === "pass")) ? "pass" : "no verdict";
    } catch (err) {
      if (!(err instanceof InputError)) throw err;
      text = `not run: ${err.message.split("\n")[0]}`;
    }
    verdicts.set(release, text);
    process.stdout.write(`${formatPin({ name: pkg, version: release })}: ${text}\n`);
    return text;
  };
  process.stdout.write(`bisect ${subject} over ${releases.length} releases of ${pkg} (${releases[0]} .. ${releases.at(-1)}), ${cases.length} cell${cases.length === 1 ? "" : "s"}\n`);
  const found = await bisectReleases(releases, verdict);
  if (!found) {
    process.stdout.write(`no boundary: ${releases.at(-1)} gives ${releases[0]}'s verdict (${verdicts.get(releases[0]!)}); ${verdicts.size} of ${releases.length} releases run\n`);
    return 1;
  }
  const [last, first] = found;
  process.stdout.write(
    `first release whose verdict differs from ${releases[0]}'s: ${pkg} ${first} (${last}: ${verdicts.get(last)}; ${first}: ${verdicts.get(first)}); ` +
      `${verdicts.size} of ${releases.length} releases run\n`,
  );
  return 0;
}

/**
 * The last release with the first release's verdict and the first one after it that differs, by bisection
 * (the verdict is taken to change once): the two ends, then about log2(n) releases between; null when the
 * last release's verdict is the first's.
 */
export async function bisectReleases(releases: readonly string[], verdict: (release: string) => Promise<string>): Promise<[string, string] | null> {
  const first = await verdict(releases[0]!);
  if ((await verdict(releases.at(-1)!)) === first) return null;
  let lo = 0;
  let hi = releases.length - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if ((await verdict(releases[mid]!)) === first) lo = mid;
    else hi = mid;
  }
  return [releases[lo]!, releases[hi]!];
}

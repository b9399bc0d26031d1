/**
 * `clip-parity fuzz [--runs N] [--seed S|random] [--subject NAME|PATH]... [--self-test] [--out DIR]`
 * `clip-parity fuzz --replay FILE [--subject NAME|PATH]`   (`npm run fuzz -- ...` is the same)
 *
 * Without --subject it fuzzes every correct built-in subject, the optimizer-owned titan-mtp included:
 * N generated cases each (default DEFAULT_RUNS), every property of harness/fuzz/run.ts. --self-test instead
 * checks that the fuzzer catches every known-bad subject (the optimizer-owned ones included) by one
 * of its own checks within SELF_TEST_RUNS cases, and shows the shrunk counterexamples. The seed defaults to the CI seed (CLIP_PARITY_FUZZ_SEED or DEFAULT_SEED), so a
 * run is reproducible; `--seed random` draws one and prints it.
 * Exit status: 0 all properties held, 1 a counterexample was found (or a known-bad subject was not
 * caught), 2 bad input.
 */
import { InputError } from "../harness/errors.ts";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS, OPTIMIZER_KNOWN_BAD_SUBJECTS, OPTIMIZER_SUBJECTS } from "../harness/registry/registry.ts";
import { caseSize } from "../harness/fuzz/case.ts";
import { DEFAULT_OUT_DIR, DEFAULT_RUNS, envSeed, fuzzIsolated, SELF_TEST_RUNS } from "../harness/fuzz/fuzz.ts";
import { DEFAULT_TIMEOUT_MS, probeSubjects } from "../harness/sandbox/pool.ts";
import { printReplay } from "../harness/fuzz/replay.ts";
import { parseCommand, parseInteger, str, type CommandSpec } from "./args.ts";

export const spec: CommandSpec = {
  name: "fuzz",
  summary:
    "Property-based fuzzing of placement buckets: generated layouts, sub-meshes, placements and regimes (for an optimizer-owned subject " +
    "also tie groups in the finalize regime and 2-3 step training runs), each case judged by every check; a failure is shrunk and " +
    "written as a replayable case file. --self-test checks that every known-bad subject is caught.",
  flags: {
    runs: { type: "string", value: "N", description: "cases per subject", defaultText: `${DEFAULT_RUNS}; ${SELF_TEST_RUNS} with --self-test` },
    seed: { type: "string", value: "S|random", description: "fast-check seed, an integer in (-2^31, 2^31)", defaultText: "CLIP_PARITY_FUZZ_SEED or the CI seed" },
    subject: { type: "string", multiple: true, value: "NAME|PATH", description: "subjects to fuzz (default: the correct built-in ones; with --self-test the known-bad ones)" },
    replay: { type: "string", value: "FILE", description: "replay a counterexample file" },
    "self-test": { type: "boolean", description: "each known-bad subject must fail one of its own checks" },
    out: { type: "string", value: "DIR", description: "where counterexample files go", default: DEFAULT_OUT_DIR },
    quiet: { type: "boolean", description: "no progress, shorter output" },
  },
  notes: "exit status: 0 all properties held, 1 a counterexample was found (or a known-bad subject was not caught), 2 bad input",
};

function parseSeed(text: string | undefined): number {
  if (text === undefined) return envSeed();
  if (text === "random") return (Date.now() ^ (Math.random() * 2 ** 31)) | 0;
  const negative = text.startsWith("-");
  const n = parseInteger(negative ? text.slice(1) : text, "--seed", { max: 2 ** 31 - 1 });
  return negative ? -n : n;
}

/** A user subject's catchBy, read in a worker (its module never loads in this thread). */
async function probeCatchBy(spec: string): Promise<readonly string[] | undefined> {
  const [info] = await probeSubjects([spec], DEFAULT_TIMEOUT_MS);
  return info?.catchBy;
}

export async function run(argv: string[]): Promise<number> {
  const out = process.stdout;
  const v = parseCommand(spec, argv);
  const subjects = v.subject as string[] | undefined;
  if (typeof v.replay === "string") {
    if (subjects && subjects.length > 1) throw new InputError("--replay runs one subject: give --subject at most once");
    const { memoryTable } = await import("./print.ts");
    return await printReplay(v.replay, { subject: subjects?.[0], memoryTable });
  }
  const seed = parseSeed(str(v, "seed"));
  const outDir = str(v, "out")!;
  const quiet = Boolean(v.quiet);
  if (subjects?.length) await probeSubjects(subjects.filter((n) => !Object.hasOwn(BUILTIN_SUBJECTS, n)), DEFAULT_TIMEOUT_MS);

  if (v["self-test"]) {
    const runs = v.runs === undefined ? SELF_TEST_RUNS : parseInteger(str(v, "runs")!, "--runs", { min: 1 });
    const names = subjects ?? [...KNOWN_BAD_SUBJECTS, ...OPTIMIZER_KNOWN_BAD_SUBJECTS];
    out.write(`fuzz self-test: each known-bad subject must fail one of its own checks within ${runs} cases (seed ${seed})\n`);
    let missed = 0;
    for (const name of names) {
      const targets = (Object.hasOwn(BUILTIN_SUBJECTS, name) ? BUILTIN_SUBJECTS[name]!.catchBy : (await probeCatchBy(name))) ?? [];
      if (!targets.length) throw new InputError(`--self-test: subject ${name} declares no catchBy checks`);
      const { result: r, fault } = await fuzzIsolated({ subject: name, params: { seed, numRuns: runs, targets, outDir, subjectSpec: name } });
      if (!r) {
        missed++;
        out.write(`MISSED ${name}: isolation: ${fault}\n`);
        continue;
      }
      if (!r.counterexample) {
        missed++;
        out.write(`MISSED ${name}: no case of ${runs} failed ${targets.join(" or ")}\n`);
        continue;
      }
      const ce = r.counterexample;
      const s = caseSize(ce.fuzzCase);
      out.write(
        `caught ${name} by ${[...new Set(ce.violations.map((x) => x.id))].join(", ")} at case ${r.numRuns}, ` +
          `shrunk ${r.numShrinks} times to ${s.ranks} ranks, ${s.params} params, ${s.elements} elements (${(r.ms / 1000).toFixed(1)} s)\n`,
      );
      if (!quiet) out.write(`  ${ce.message.split("\n").filter((l) => /counterexample|replay:|built-in/.test(l)).map((l) => l.trim()).join("\n  ")}\n`);
    }
    out.write(`${names.length - missed} of ${names.length} known-bad subjects caught\n`);
    return missed ? 1 : 0;
  }

  const runs = v.runs === undefined ? DEFAULT_RUNS : parseInteger(str(v, "runs")!, "--runs", { min: 1 });
  const names = subjects ?? [...CORRECT_SUBJECTS, ...OPTIMIZER_SUBJECTS];
  out.write(`fuzz: ${names.join(", ")}: ${runs} cases each, seed ${seed}\n`);
  const started = performance.now();
  let failed = 0;
  for (const name of names) {
    // the whole search runs in a worker: the subject's code never runs in this thread
    const { result: r, fault } = await fuzzIsolated({ subject: name, params: { seed, numRuns: runs, outDir, subjectSpec: name } });
    if (!r) {
      failed++;
      out.write(`FAIL ${name}: isolation: ${fault}\n`);
    } else if (r.counterexample) {
      failed++;
      out.write(`FAIL ${r.counterexample.message}\n`);
    } else {
      out.write(`pass ${name}: ${r.numRuns} cases in ${(r.ms / 1000).toFixed(1)} s\n`);
    }
  }
  out.write(`${names.length - failed} of ${names.length} subjects passed; ${((performance.now() - started) / 1000).toFixed(1)} s in all\n`);
  return failed ? 1 : 0;
}

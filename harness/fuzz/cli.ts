/**
 * `npm run fuzz -- [--runs N] [--seed S|random] [--subject NAME|PATH]... [--self-test] [--out DIR]`
 * `npm run fuzz -- --replay FILE [--subject NAME|PATH]`
 *
 * Without --subject it fuzzes every correct built-in subject: N generated cases each (default 200),
 * every property of harness/fuzz/run.ts. --self-test instead checks that the fuzzer catches every
 * known-bad subject by one of its own checks within SELF_TEST_RUNS cases, and shows the shrunk
 * counterexamples. The seed defaults to the CI seed (CLIP_PARITY_FUZZ_SEED or DEFAULT_SEED), so a
 * run is reproducible; `--seed random` draws one and prints it.
 * Exit status: 0 all properties held, 1 a counterexample was found (or a known-bad subject was not
 * caught), 2 bad input.
 */
import { parseArgs } from "node:util";
import { ClipParityError, InputError } from "../errors.ts";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS, loadSubject } from "../clip/registry.ts";
import { caseSize } from "./case.ts";
import { DEFAULT_OUT_DIR, envSeed, fuzzSubject, SELF_TEST_RUNS } from "./fuzz.ts";
import { printReplay } from "./replay.ts";

const USAGE = `usage: npm run fuzz -- [--runs N] [--seed S|random] [--subject NAME|PATH]... [--self-test] [--out DIR] [--quiet]
       npm run fuzz -- --replay FILE [--subject NAME|PATH]`;

function positiveInt(text: string, flag: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) throw new InputError(`${flag}: "${text}" is not a positive integer`);
  return n;
}

function parseSeed(text: string | undefined): number {
  if (text === undefined) return envSeed();
  if (text === "random") return (Date.now() ^ (Math.random() * 2 ** 31)) | 0;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || Math.abs(n) >= 2 ** 31) throw new InputError(`--seed: "${text}" is not an integer in (-2^31, 2^31) or "random"`);
  return n;
}

export async function main(argv: string[]): Promise<number> {
  const out = process.stdout;
  const err = process.stderr;
  try {
    let v: Record<string, string | boolean | string[] | undefined>;
    try {
      v = parseArgs({
        args: argv,
        options: {
          runs: { type: "string" },
          seed: { type: "string" },
          subject: { type: "string", multiple: true },
          replay: { type: "string" },
          "self-test": { type: "boolean" },
          out: { type: "string" },
          quiet: { type: "boolean" },
          help: { type: "boolean", short: "h" },
        },
        strict: true,
        allowPositionals: false,
      }).values;
    } catch (e) {
      throw new InputError(`${(e as Error).message}\n${USAGE}`);
    }
    if (v.help) {
      out.write(`${USAGE}\n`);
      return 0;
    }
    const subjects = v.subject as string[] | undefined;
    if (typeof v.replay === "string") {
      if (subjects && subjects.length > 1) throw new InputError("--replay runs one subject: give --subject at most once");
      const { memoryTable } = await import("../run/cli.ts");
      return await printReplay(v.replay, { subject: subjects?.[0], memoryTable });
    }
    const seed = parseSeed(v.seed as string | undefined);
    const outDir = (v.out as string | undefined) ?? DEFAULT_OUT_DIR;
    const quiet = Boolean(v.quiet);

    if (v["self-test"]) {
      const runs = v.runs === undefined ? SELF_TEST_RUNS : positiveInt(v.runs as string, "--runs");
      const names = subjects ?? KNOWN_BAD_SUBJECTS;
      out.write(`fuzz self-test: each known-bad subject must fail one of its own checks within ${runs} cases (seed ${seed})\n`);
      let missed = 0;
      for (const name of names) {
        const subject = await loadSubject(name);
        const targets = subject.catchBy ?? [];
        if (!targets.length) throw new InputError(`--self-test: subject ${name} declares no catchBy checks`);
        const r = await fuzzSubject(subject, { seed, numRuns: runs, targets, outDir });
        if (!r.counterexample) {
          missed++;
          out.write(`MISSED ${name}: no case of ${runs} failed ${targets.join(" or ")}\n`);
          continue;
        }
        const ce = r.counterexample;
        const s = caseSize(ce.fuzzCase);
        out.write(
          `caught ${name} by ${[...new Set(ce.violations.map((x) => x.id))].join(", ")} at case ${r.details.numRuns}, ` +
            `shrunk ${r.details.numShrinks} times to ${s.ranks} ranks, ${s.params} params, ${s.elements} elements (${(r.ms / 1000).toFixed(1)} s)\n`,
        );
        if (!quiet) out.write(`  ${ce.message.split("\n").filter((l) => /counterexample|replay:|built-in/.test(l)).map((l) => l.trim()).join("\n  ")}\n`);
      }
      out.write(`${names.length - missed} of ${names.length} known-bad subjects caught\n`);
      return missed ? 1 : 0;
    }

    const runs = v.runs === undefined ? 200 : positiveInt(v.runs as string, "--runs");
    const names = subjects ?? CORRECT_SUBJECTS;
    out.write(`fuzz: ${names.join(", ")}: ${runs} cases each, seed ${seed}\n`);
    const started = performance.now();
    let failed = 0;
    for (const name of names) {
      const subject = Object.hasOwn(BUILTIN_SUBJECTS, name) ? BUILTIN_SUBJECTS[name]! : await loadSubject(name);
      let done = 0;
      const tty = !quiet && err.isTTY;
      const r = await fuzzSubject(subject, {
        seed,
        numRuns: runs,
        outDir,
        subjectSpec: name,
        onRun: tty
          ? () => {
              if (++done % 100 === 0) err.write(`\r  ${name}: ${done} runs`);
            }
          : undefined,
      });
      if (tty) err.write("\r\x1b[K");
      if (r.counterexample) {
        failed++;
        out.write(`FAIL ${r.counterexample.message}\n`);
      } else {
        out.write(`pass ${name}: ${r.details.numRuns} cases in ${(r.ms / 1000).toFixed(1)} s\n`);
      }
    }
    out.write(`${names.length - failed} of ${names.length} subjects passed; ${((performance.now() - started) / 1000).toFixed(1)} s in all\n`);
    return failed ? 1 : 0;
  } catch (e) {
    if (e instanceof ClipParityError) {
      err.write(`clip-parity fuzz: ${e.message}\n`);
      return e.exitCode;
    }
    throw e;
  }
}

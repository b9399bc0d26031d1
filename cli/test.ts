/**
 * `npm test [-- --matrix NAME|FILE] [--backend cpu|cuda|meta] [--golden check|update|off] [--report LIST] [--out DIR] [vitest args...]`
 *
 * Plain `npm test` is the project's whole suite (every suites/ file, the cpu matrix among them). With
 * `--matrix NAME` it runs that matrix's test alone (suites/matrix.test.ts) and says so. The matrix options
 * are validated here by the same library calls as `clip-parity run` (a cuda matrix without CUDA is refused
 * with the same message, exit 2) and travel to the suite as environment variables, since vitest refuses
 * flags it does not know; everything else goes to vitest.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { ClipParityError, InputError } from "../harness/errors.ts";
import { parseBackend, resolveBackend, selectCells } from "../harness/run/policy.ts";
import { goldenPath, readGolden, GOLDEN_MODES } from "../harness/run/golden.ts";
import type { BackendKind } from "../harness/backend/backend.ts";
import { assertWritableDir } from "../harness/util/fs.ts";
import { resolveMatrix } from "../matrix/index.ts";
import { parseReporters, REPORTER_NAMES } from "../reports/index.ts";
import { envValue, type EnvName } from "../harness/util/env.ts";
import { helpText, unknownFlagError, type CommandSpec, type FlagSpec } from "./args.ts";

/** The matrix suite: what `--matrix NAME` runs alone. */
export const MATRIX_SUITE = "suites/matrix.test.ts";

/** Our flags, each with the variable that carries it to the suite; the one table for parsing and --help. */
const TEST_FLAG_TABLE = {
  matrix: { env: "CLIP_PARITY_MATRIX", type: "string", value: "NAME|FILE", description: `run only this matrix's test (${MATRIX_SUITE}); without it, every suite and the cpu matrix` },
  backend: { env: "CLIP_PARITY_BACKEND", type: "string", value: "cpu|cuda|meta", description: "the matrix's backend; default: the matrix's own" },
  golden: {
    env: "CLIP_PARITY_GOLDEN",
    type: "string",
    value: GOLDEN_MODES.join("|"),
    description: "the matrix's golden: compare with golden/<matrix>.json, rewrite it, or neither",
    defaultText: "check when golden/<matrix>.json exists for the backend, CI or not",
  },
  report: { env: "CLIP_PARITY_REPORT", type: "string", value: REPORTER_NAMES.join(","), description: "reporters to write after the matrix suite" },
  out: { env: "CLIP_PARITY_OUT", type: "string", value: "DIR", description: "folder for the reports" },
} as const satisfies Record<string, FlagSpec & { env: EnvName }>;

type TestFlag = keyof typeof TEST_FLAG_TABLE;
const TEST_FLAG_NAMES = Object.keys(TEST_FLAG_TABLE) as TestFlag[];

export const spec: CommandSpec = {
  name: "test",
  summary: "npm test: the project's suites through vitest; with --matrix, that matrix's test alone.",
  flags: TEST_FLAG_TABLE,
  positionals: "[vitest args...]",
  notes:
    "Every other argument goes to vitest (npx vitest --help): a file filter, -t PATTERN, --reporter=dot.\n" +
    "exit status: vitest's (0 every test passed, 1 a test failed); 2 bad input",
};

/** `npm test` is `clip-parity test` in the help's usage line. */
function testHelp(): string {
  return helpText(spec).replace("usage: clip-parity test", "usage: npm test --");
}

/** Splits our flags (`--matrix X`, `--matrix=X`, ...) from vitest's; a near miss of ours (`--matrx`) is refused with a suggestion. */
export function splitTestArgs(argv: readonly string[]): { ours: Partial<Record<TestFlag, string>>; vitest: string[]; help: boolean } {
  const ours: Partial<Record<TestFlag, string>> = {};
  const vitest: string[] = [];
  let help = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--help" || a === "-h") {
      help = true;
      continue;
    }
    const flag = a.startsWith("--") ? a.slice(2).split("=")[0]! : undefined;
    const name = TEST_FLAG_NAMES.find((f) => f === flag);
    if (!name) {
      if (flag !== undefined) {
        const near = unknownFlagError("npm test", flag, TEST_FLAG_NAMES, { onlyNear: true });
        if (near) throw near;
      }
      vitest.push(a);
      continue;
    }
    const value = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[++i];
    if (value === undefined) throw new InputError(`npm test: --${name} needs a value`);
    ours[name] = value;
  }
  return { ours, vitest, help };
}

/**
 * The golden mode of the matrix suite: as asked (`--golden`, CLIP_PARITY_GOLDEN), else check when
 * golden/<matrix>.json exists for the backend the suite runs on, CI or not: a golden drift is a failure on a
 * developer's machine too (`--golden update` is how one rewrites it).
 */
export function suiteGoldenMode(matrix: string, backend: BackendKind, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const asked = envValue("CLIP_PARITY_GOLDEN", env);
  if (asked !== undefined) return asked;
  const path = goldenPath(matrix);
  return existsSync(path) && readGolden(path).header.backend === backend ? "check" : undefined;
}

/** The environment the suite runs with and the backend it runs on, every value checked first (exit 2 on bad input). */
export function testEnvironment(ours: Partial<Record<TestFlag, string>>, env: NodeJS.ProcessEnv = process.env): { env: NodeJS.ProcessEnv; backend: BackendKind } {
  const matrix = resolveMatrix(ours.matrix ?? envValue("CLIP_PARITY_MATRIX", env) ?? "cpu");
  const requested = ours.backend ?? envValue("CLIP_PARITY_BACKEND", env);
  const backend = resolveBackend(matrix, requested === undefined ? undefined : parseBackend(requested), `npm test -- --matrix ${ours.matrix ?? matrix.name}`);
  selectCells(matrix); // a matrix that selects nothing is refused here too
  if (ours.report !== undefined) parseReporters(ours.report);
  if (ours.out !== undefined) assertWritableDir(ours.out, "--out");
  if (ours.golden !== undefined && !(GOLDEN_MODES as readonly string[]).includes(ours.golden)) {
    throw new InputError(`--golden: "${ours.golden}" is not one of ${GOLDEN_MODES.join(", ")}`);
  }
  const out: NodeJS.ProcessEnv = { ...env, CLIP_PARITY_BACKEND: backend };
  for (const name of TEST_FLAG_NAMES) {
    const v = ours[name];
    if (v !== undefined) out[TEST_FLAG_TABLE[name].env] = v;
  }
  return { env: out, backend };
}

/** What vitest is given: with --matrix and no file filter of one's own, the matrix suite alone. */
export function vitestArgs(ours: Partial<Record<TestFlag, string>>, rest: readonly string[]): string[] {
  const filtered = rest.some((a) => !a.startsWith("-"));
  return ours.matrix !== undefined && !filtered ? [MATRIX_SUITE, ...rest] : [...rest];
}

export async function testMain(argv: readonly string[]): Promise<number> {
  let env: NodeJS.ProcessEnv;
  let args: string[];
  try {
    const { ours, vitest, help } = splitTestArgs(argv);
    if (help) {
      process.stdout.write(testHelp());
      return 0;
    }
    const suite = testEnvironment(ours);
    env = suite.env;
    args = vitestArgs(ours, vitest);
    if (args[0] === MATRIX_SUITE && ours.matrix !== undefined) {
      process.stderr.write(`npm test: --matrix ${ours.matrix}: running ${MATRIX_SUITE} alone on ${suite.backend}; plain \`npm test\` runs every suite\n`);
    }
  } catch (err) {
    if (err instanceof ClipParityError) {
      process.stderr.write(`clip-parity: ${err.message}\n`);
      return err.exitCode;
    }
    throw err;
  }
  // vitest's package exports do not include vitest.mjs: find it beside its package.json.
  const vitest = join(dirname(createRequire(import.meta.url).resolve("vitest/package.json")), "vitest.mjs");
  return runVitest([vitest, "run", ...args], env);
}

/** vitest names an unknown flag camel-cased, without a "no-" prefix (suchFlag for --no-such-flag): the flag as the user typed it. */
function flagAsGiven(reported: string, args: readonly string[]): string {
  const kebab = reported.replace(/[A-Z]/g, (m) => `-${m.toLowerCase()}`);
  const given = args.map((a) => (a.startsWith("--") ? a.slice(2).split("=")[0]! : "")).find((f) => f === kebab || f === `no-${kebab}` || f === reported);
  return given ?? kebab;
}

/**
 * vitest with its output as it comes, but a flag it does not know (its CACError and stack trace) becomes
 * our one-line error, exit 2.
 */
function runVitest(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolvePromise) => {
    const child = spawn(process.execPath, args, { stdio: ["inherit", "inherit", "pipe"], env });
    let refused: string | undefined;
    child.stderr.on("data", (chunk: Buffer) => {
      const text = chunk.toString("utf8");
      const unknown = /CACError: Unknown option `([^`]+)`/.exec(text);
      if (unknown) refused ??= flagAsGiven(unknown[1]!.replace(/^-+/, ""), args);
      if (refused === undefined) process.stderr.write(chunk);
    });
    child.on("close", (code) => {
      if (refused !== undefined) {
        process.stderr.write(`clip-parity: ${unknownFlagError("npm test", refused, TEST_FLAG_NAMES)!.message}\n`);
        resolvePromise(2);
        return;
      }
      resolvePromise(code ?? 1);
    });
  });
}

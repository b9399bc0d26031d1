/**
 * `npm test [-- --matrix NAME|FILE] [--backend cpu|cuda|meta] [--report LIST] [--out DIR] [vitest args...]`
 *
 * The project's own tests and a matrix through vitest. The matrix options are validated here by the
 * same library calls as `clip-parity run` (a cuda matrix without CUDA is refused with the same
 * message, exit 2) and travel to the suite as environment variables, since vitest refuses flags it
 * does not know; everything else goes to vitest.
 */
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { ClipParityError } from "../harness/errors.ts";
import { parseBackend, resolveBackend, selectCells } from "../harness/run/policy.ts";
import { assertWritableDir } from "../harness/util/fs.ts";
import { resolveMatrix } from "../matrix/index.ts";
import { parseReporters } from "../reports/index.ts";
import { envValue } from "../harness/util/env.ts";

export const TEST_FLAGS = { matrix: "CLIP_PARITY_MATRIX", backend: "CLIP_PARITY_BACKEND", report: "CLIP_PARITY_REPORT", out: "CLIP_PARITY_OUT" } as const;

/** Splits our flags (`--matrix X`, `--matrix=X`, ...) from vitest's. */
export function splitTestArgs(argv: readonly string[]): { ours: Partial<Record<keyof typeof TEST_FLAGS, string>>; vitest: string[] } {
  const ours: Partial<Record<keyof typeof TEST_FLAGS, string>> = {};
  const vitest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const name = (Object.keys(TEST_FLAGS) as (keyof typeof TEST_FLAGS)[]).find((f) => a === `--${f}` || a.startsWith(`--${f}=`));
    if (!name) {
      vitest.push(a);
      continue;
    }
    const value = a.includes("=") ? a.slice(a.indexOf("=") + 1) : argv[++i];
    if (value === undefined) throw new ClipParityError("E_INPUT", `npm test: --${name} needs a value`);
    ours[name] = value;
  }
  return { ours, vitest };
}

export function testMain(argv: readonly string[]): number {
  let env: NodeJS.ProcessEnv;
  let rest: string[];
  try {
    const { ours, vitest } = splitTestArgs(argv);
    const matrix = resolveMatrix(ours.matrix ?? envValue("CLIP_PARITY_MATRIX") ?? "cpu");
    const requested = ours.backend ?? envValue("CLIP_PARITY_BACKEND");
    const backend = resolveBackend(matrix, requested === undefined ? undefined : parseBackend(requested), `npm test -- --matrix ${ours.matrix ?? matrix.name}`);
    selectCells(matrix); // a matrix that selects nothing is refused here too
    if (ours.report !== undefined) parseReporters(ours.report);
    if (ours.out !== undefined) assertWritableDir(ours.out, "--out");
    env = { ...process.env, CLIP_PARITY_BACKEND: backend };
    for (const [flag, variable] of Object.entries(TEST_FLAGS)) {
      const v = ours[flag as keyof typeof TEST_FLAGS];
      if (v !== undefined) env[variable] = v;
    }
    rest = vitest;
  } catch (err) {
    if (err instanceof ClipParityError) {
      process.stderr.write(`clip-parity: ${err.message}\n`);
      return err.exitCode;
    }
    throw err;
  }
  // vitest's package exports do not include vitest.mjs: find it beside its package.json.
  const vitest = join(dirname(createRequire(import.meta.url).resolve("vitest/package.json")), "vitest.mjs");
  const r = spawnSync(process.execPath, [vitest, "run", ...rest], { stdio: "inherit", env });
  return r.status ?? 1;
}

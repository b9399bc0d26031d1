/**
 * `clip-parity resume`: one resume cell from the command line. Exit status as for `run`: 0 the check
 * passed (or was skipped), 1 it failed, 2 bad input, a refused checkpoint included.
 */
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { InputError } from "../errors.ts";
import { parseLayout, formatLayout } from "../layout/layout.ts";
import { getModel } from "../model/models.ts";
import { loadSubject } from "../clip/registry.ts";
import { REGIMES, type Regime } from "../clip/regimes.ts";
import { DTYPES, formatNorm, type Cell } from "../run/cell.ts";
import { ADAMW } from "./adamw.ts";
import { LOADER_VARIANTS, readIndex, type LoaderVariant } from "./checkpoint.ts";
import { DEFAULT_STEPS, runResume, type ResumeCell, type ResumeResult } from "./resume.ts";

export const RESUME_USAGE =
  "resume    --subject NAME|PATH --layout SPEC [--resume-layout SPEC] --model NAME --dtype f32|bf16|f16 [--steps T] [--save-at K]\n" +
  "            [--norm 2] [--regime active] [--seed N] [--dir DIR] [--from-existing] [--loader correct|drop-step|drop-tied] [--json FILE]\n" +
  "  resume    --matrix NAME [--json FILE]   (the matrix's resume section: matrix/resume.ts)";

const HELP = `usage: clip-parity ${RESUME_USAGE}

Runs T steps (default ${DEFAULT_STEPS}) of gradients, the subject's clip and AdamW (lr ${ADAMW.lr}, betas (${ADAMW.beta1}, ${ADAMW.beta2}),
eps ${ADAMW.eps}, weight_decay ${ADAMW.weightDecay}; float32 state) in --layout, writes a sharded checkpoint after step K
(default T/2, rounded down), resumes from it in --resume-layout (default: --layout) and checks resume.equal:
parameters, optimizer state and step counts bitwise equal to the uninterrupted run's.
  --dir DIR         keep the checkpoint in DIR (format: docs/checkpoint.md); default: a temporary directory
  --from-existing   do not write a checkpoint: resume from the one already in --dir (--layout, --save-at
                    default to the checkpoint's; a checkpoint that does not match is refused, exit 2)
  --loader VARIANT  a known-bad loader (drop-step, drop-tied) that resume.equal must catch
  --matrix NAME     run the resume section of a matrix (cpu): correct cells must pass, known-bad loaders fail

exit status: 0 passed (or skipped), 1 resume.equal failed, 2 bad input or a refused checkpoint`;

function intFlag(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(n)) throw new InputError(`--${flag}: "${v}" is not a non-negative integer`);
  return n;
}

function need(v: string | undefined, flag: string): string {
  if (v === undefined) throw new InputError(`--${flag} is required\nusage: clip-parity ${RESUME_USAGE}`);
  return v;
}

function writeJsonAtomic(path: string, value: unknown): void {
  const abs = resolve(path);
  mkdirSync(dirname(abs), { recursive: true });
  const tmp = `${abs}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(value, (_, x) => (x === Infinity ? "inf" : x), 2) + "\n");
  renameSync(tmp, abs);
}

export async function cmdResume(args: string[]): Promise<number> {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        subject: { type: "string" },
        layout: { type: "string" },
        "resume-layout": { type: "string" },
        model: { type: "string" },
        dtype: { type: "string" },
        norm: { type: "string" },
        regime: { type: "string" },
        seed: { type: "string" },
        steps: { type: "string" },
        "save-at": { type: "string" },
        dir: { type: "string" },
        "from-existing": { type: "boolean" },
        loader: { type: "string" },
        json: { type: "string" },
        matrix: { type: "string" },
        help: { type: "boolean" },
      },
    }).values as Record<string, string | boolean | undefined>;
  } catch (err) {
    throw new InputError(`${(err as Error).message}\nusage: clip-parity ${RESUME_USAGE}`);
  }
  if (v.help) {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  const s = (k: string) => (typeof v[k] === "string" ? (v[k] as string) : undefined);
  const matrix = s("matrix");
  if (matrix !== undefined) {
    const other = Object.keys(v).filter((k) => k !== "matrix" && k !== "json" && v[k] !== undefined);
    if (other.length) throw new InputError(`--matrix runs a whole resume section; it takes only --json (got --${other.join(", --")})`);
    return runMatrix(matrix, s("json"));
  }
  const fromExisting = v["from-existing"] === true;
  const dir = s("dir");
  if (fromExisting && !dir) throw new InputError("--from-existing needs --dir: the directory of the checkpoint to resume from");
  // with --from-existing, the checkpoint's own layout and step are the defaults
  const existing = fromExisting ? readIndex(dir!) : undefined;

  const model = need(s("model"), "model");
  getModel(model);
  const dtype = need(s("dtype"), "dtype");
  if (!(DTYPES as readonly string[]).includes(dtype)) throw new InputError(`--dtype: "${dtype}" is not one of ${DTYPES.join(", ")}`);
  const normText = s("norm") ?? "2";
  const normType = normText === "inf" ? Infinity : Number(normText);
  if (!(normType > 0)) throw new InputError(`--norm: "${normText}" is not 2, 1, inf or a positive number`);
  const regime = s("regime") ?? "active";
  if (!(REGIMES as readonly string[]).includes(regime)) throw new InputError(`--regime: "${regime}" is not one of ${REGIMES.join(", ")}`);
  const loader = s("loader") ?? "correct";
  if (!(LOADER_VARIANTS as readonly string[]).includes(loader)) throw new InputError(`--loader: "${loader}" is not one of ${LOADER_VARIANTS.join(", ")}`);
  const layoutText = s("layout") ?? existing?.layoutSpec;
  const layout = parseLayout(need(layoutText, "layout"));
  const steps = intFlag(s("steps"), "steps") ?? DEFAULT_STEPS;
  const saveAt = intFlag(s("save-at"), "save-at") ?? existing?.step ?? Math.floor(steps / 2);
  const resumeText = s("resume-layout");
  const cell: ResumeCell = {
    subject: need(s("subject"), "subject"),
    layout,
    ...(resumeText !== undefined ? { resumeLayout: parseLayout(resumeText) } : {}),
    model,
    dtype: dtype as Cell["dtype"],
    normType,
    regime: regime as Regime,
    seed: intFlag(s("seed"), "seed") ?? 0,
    steps,
    saveAt,
    ...(loader !== "correct" ? { loader: loader as LoaderVariant } : {}),
  };
  const subject = await loadSubject(cell.subject);
  const r = await runResume(cell, { subject, dir, fromExisting });
  printResult(r);
  const failed = r.checks.some((c) => c.status === "fail");
  const jsonPath = s("json");
  if (jsonPath) {
    const passed = failed ? 0 : r.checks.every((c) => c.status === "pass") ? 1 : 0;
    writeJsonAtomic(jsonPath, { kind: "resume", results: [r], summary: { cells: 1, passed, failed: failed ? 1 : 0, skipped: 1 - passed - (failed ? 1 : 0) } });
  }
  return failed ? 1 : 0;
}

async function runMatrix(name: string, jsonPath: string | undefined): Promise<number> {
  const { resumeCases, resumeSections } = await import("../../matrix/resume.ts");
  const cases = resumeCases(name);
  if (cases.length === 0) {
    throw new InputError(`--matrix: "${name}" has no resume section (matrices with one: ${Object.keys(resumeSections()).join(", ")})`);
  }
  const results: ResumeResult[] = [];
  let wrong = 0;
  for (const c of cases) {
    const r = await runResume(c, { subject: await loadSubject(c.subject) });
    results.push(r);
    const check = r.checks[0]!;
    const met = c.expect === "pass" ? check.status !== "fail" : check.status === "fail";
    if (!met) wrong++;
    process.stdout.write(`${met ? "ok  " : "FAIL"} ${check.status.padEnd(4)} (expected ${c.expect}) ${r.id}  ${(r.durationMs / 1000).toFixed(1)} s\n`);
    if (!met) process.stdout.write(`     ${check.message.replace(/\n/g, "\n     ")}\n`);
  }
  process.stdout.write(`${cases.length} resume cells: ${cases.length - wrong} as expected, ${wrong} not\n`);
  if (jsonPath) {
    const failed = results.filter((r) => r.checks[0]!.status === "fail").length;
    const passed = results.filter((r) => r.checks[0]!.status === "pass").length;
    writeJsonAtomic(jsonPath, { kind: "resume", matrix: name, results, summary: { cells: results.length, passed, failed, skipped: results.length - passed - failed, unexpected: wrong } });
  }
  return wrong ? 1 : 0;
}

function printResult(r: ResumeResult): void {
  const out = process.stdout;
  const c = r.cell;
  out.write(`${r.id}\n`);
  out.write(
    `  checkpoint after step ${r.checkpoint.step} of ${c.steps} from ${r.checkpoint.layout}: ${r.checkpoint.files} files, ` +
      `${r.checkpoint.bytes.toLocaleString("en-US")} bytes${r.checkpoint.dir ? ` in ${r.checkpoint.dir}` : ""}\n`,
  );
  out.write(`  resumed in ${formatLayout(c.resumeLayout ?? c.layout)}; norm ${formatNorm(c.normType)}, regime ${c.regime}, ${r.durationMs.toFixed(0)} ms\n`);
  for (const n of r.norms) out.write(`  step ${String(n.step).padStart(3)}  norm ${n.resumed}  uninterrupted ${n.uninterrupted}\n`);
  for (const k of r.checks) out.write(`  ${k.status.padEnd(4)} ${k.id}${k.message ? `: ${k.message.replace(/\n/g, "\n       ")}` : ""}\n`);
}

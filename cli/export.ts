/**
 * `clip-parity export`: writes a standalone PyTorch script that reproduces one cell of a torch: subject
 * (harness/external/torch/export.ts). Exit status as the rest of the CLI: 0 written, 2 bad input (a message
 * naming the flag and the value); 1 is not used, since a failing cell is what one exports.
 *
 *   clip-parity export --cell ID [--subject torch:...] --out DIR [--no-run]
 *   clip-parity export --subject torch:... --layout SPEC --model NAME --dtype D --norm P --regime R
 *                      [--seed N] [--max-norm X] [--error-if-nonfinite true|false] --out DIR [--no-run]
 *
 * Standalone so that the dispatcher only has to route "export" here: `return await cmdExport(rest)`.
 */
import { parseArgs } from "node:util";
import { ClipParityError, InputError } from "../harness/errors.ts";
import { parseLayout } from "../harness/layout/layout.ts";
import { getModel } from "../harness/model/models.ts";
import { REGIMES, type Regime } from "../harness/clip/regimes.ts";
import type { DType } from "../harness/clip/api.ts";
import type { Cell } from "../harness/run/cell.ts";
import { exportCell, parseCellId } from "../harness/external/torch/export.ts";

export const EXPORT_USAGE = `usage: clip-parity export --cell ID [--subject torch:...] --out DIR [--no-run]
       clip-parity export --subject torch:... --layout SPEC --model NAME --dtype f32|bf16|f16 --norm 2|1|inf|P --regime NAME
                          [--seed N] [--max-norm X] [--error-if-nonfinite true|false] --out DIR [--no-run]

Writes DIR/repro-<cell>.py: torchrun --standalone --nproc-per-node W DIR/repro-<cell>.py reproduces the cell
with torch and the target alone (gloo on CPU, NCCL on GPUs) and prints expected against got. --no-run skips
running the cell through clip-parity first (its failures go in the script's header).`;

const CELL_FLAGS = ["layout", "model", "dtype", "norm", "regime", "seed", "max-norm", "error-if-nonfinite"] as const;

function cellFromFlags(v: Record<string, string | boolean | undefined>): Cell {
  const need = (f: string) => {
    const x = v[f];
    if (typeof x !== "string") throw new InputError(`export: --${f} is required (or give --cell ID)\n${EXPORT_USAGE}`);
    return x;
  };
  const subject = need("subject");
  const model = need("model");
  getModel(model);
  const dtype = need("dtype");
  if (!["f32", "bf16", "f16"].includes(dtype)) throw new InputError(`--dtype: "${dtype}" is not one of f32, bf16, f16`);
  const normText = need("norm");
  const normType = normText === "inf" ? Infinity : Number(normText);
  if (!(normType > 0)) throw new InputError(`--norm: "${normText}" is not 2, 1, inf or a positive number`);
  const regime = need("regime");
  if (!(REGIMES as readonly string[]).includes(regime)) throw new InputError(`--regime: "${regime}" is not one of ${REGIMES.join(", ")}`);
  const cell: Cell = { subject, layout: parseLayout(need("layout")), model, dtype: dtype as DType, normType, regime: regime as Regime, seed: 0 };
  if (typeof v.seed === "string") {
    const n = Number(v.seed);
    if (!Number.isSafeInteger(n) || n < 0) throw new InputError(`--seed: "${v.seed}" is not a non-negative integer (at most 2^53-1)`);
    cell.seed = n;
  }
  if (typeof v["max-norm"] === "string") {
    const x = Number(v["max-norm"]);
    if (!(x > 0)) throw new InputError(`--max-norm: "${v["max-norm"]}" is not a positive number`);
    cell.maxNorm = x;
  }
  const err = v["error-if-nonfinite"];
  if (typeof err === "string") {
    if (err !== "true" && err !== "false") throw new InputError(`--error-if-nonfinite: "${err}" is not true or false`);
    cell.errorIfNonfinite = err === "true";
  }
  return cell;
}

export async function cmdExport(argv: string[]): Promise<number> {
  try {
    let v: Record<string, string | boolean | undefined>;
    try {
      v = parseArgs({
        args: argv,
        strict: true,
        allowPositionals: false,
        options: {
          cell: { type: "string" },
          subject: { type: "string" },
          out: { type: "string" },
          "no-run": { type: "boolean" },
          help: { type: "boolean" },
          ...Object.fromEntries(CELL_FLAGS.map((f) => [f, { type: "string" as const }])),
        },
      }).values as Record<string, string | boolean | undefined>;
    } catch (err) {
      throw new InputError(`export: ${(err as Error).message}\n${EXPORT_USAGE}`);
    }
    if (v.help) {
      process.stdout.write(`${EXPORT_USAGE}\n`);
      return 0;
    }
    if (typeof v.out !== "string") throw new InputError(`export: --out DIR is required\n${EXPORT_USAGE}`);
    let cell: Cell;
    if (typeof v.cell === "string") {
      const extra = CELL_FLAGS.filter((f) => v[f] !== undefined);
      if (extra.length) throw new InputError(`export: --cell fixes the cell; --${extra.join(", --")} cannot be given with it`);
      cell = parseCellId(v.cell);
      if (typeof v.subject === "string") cell.subject = v.subject;
    } else {
      cell = cellFromFlags(v);
    }
    const { path, seen, data } = await exportCell({ cell, outDir: v.out, run: !v["no-run"] });
    const failed = seen?.checks.filter((c) => c.status === "fail").map((c) => c.id) ?? [];
    const world = data.script.match(/--nproc-per-node (\d+)/)?.[1];
    process.stdout.write(
      `wrote ${path}\n` +
        (seen ? (failed.length ? `  clip-parity: ${failed.join(", ")} failed on this cell\n` : "  clip-parity: every check passed on this cell (the script will say so too)\n") : "") +
        `  run: torchrun --standalone --nproc-per-node ${world} ${path}\n`,
    );
    return 0;
  } catch (err) {
    if (err instanceof ClipParityError) {
      process.stderr.write(`clip-parity: ${err.message}\n`);
      return err.exitCode;
    }
    throw err;
  }
}

/**
 * `clip-parity export`: writes a standalone PyTorch script that reproduces one cell of a torch: subject
 * (harness/external/torch/export.ts), for filing upstream. Exit status: 0 written, 2 bad input; 1 is not
 * used, since a failing cell is what one exports.
 */
import { InputError } from "../harness/errors.ts";
import type { Cell } from "../harness/cell/cell.ts";
import { exportCell, parseCellId } from "../harness/external/torch/export.ts";
import { CELL_FLAG_NAMES, caseFromFlags, cellFlagSpecs } from "./cell-flags.ts";
import { applyWith, given, WITH_FLAG, withPinsOf, parseCommand, str, type CommandSpec } from "./args.ts";

export const spec: CommandSpec = {
  name: "export",
  summary:
    "Writes DIR/repro-<cell>.py, a standalone script that reproduces one cell of a torch: subject with torch and the " +
    "target alone: torchrun --standalone --nproc-per-node W DIR/repro-<cell>.py prints expected against got.",
  flags: {
    cell: { type: "string", value: "ID", description: "the cell, as a result file or `run` prints it (or give the cell flags below)" },
    subject: { type: "string", value: "torch:...", description: "the torch subject (with --cell: replaces the cell's)" },
    out: { type: "string", value: "DIR", description: "folder to write the script to" },
    "no-run": { type: "boolean", description: "do not run the cell through clip-parity first (its failures go in the script's header)" },
    full: { type: "boolean", description: "the cell's own gradients and every check, even where the layout alone fails (then minimised by default)" },
    cost: { type: "boolean", description: "for a cell over its collective budget: the script also times the clip against its fused variant (run it with REPRO_COST_PAIRS=N)" },
    ...cellFlagSpecs(),
    with: WITH_FLAG,
  },
  notes: "exit status: 0 the script was written, 2 bad input",
};

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const s = (k: string) => str(v, k);
  const out = s("out");
  if (out === undefined) throw new InputError("export: --out DIR is required");
  let cell: Cell;
  const id = s("cell");
  if (id !== undefined) {
    const extra = CELL_FLAG_NAMES.filter((f) => given(v, f));
    if (extra.length) throw new InputError(`export: --cell fixes the cell; --${extra.join(", --")} cannot be given with it`);
    cell = parseCellId(id);
    if (s("subject") !== undefined) cell.subject = s("subject")!;
  } else {
    const subject = s("subject");
    if (subject === undefined) throw new InputError("export: --subject is required (or give --cell ID)");
    cell = { subject, ...caseFromFlags(v, "export", "give --cell ID") };
  }
  [cell.subject] = applyWith([cell.subject], withPinsOf(v));
  const { path, seen, data } = await exportCell({ cell, outDir: out, run: v["no-run"] !== true, full: v.full === true, cost: v.cost === true });
  const failed = seen?.checks.filter((c) => c.status === "fail").map((c) => c.id) ?? [];
  const world = data.script.match(/--nproc-per-node (\d+)/)?.[1];
  process.stdout.write(
    `wrote ${path}\n` +
      (seen ? (failed.length ? `  clip-parity: ${failed.join(", ")} failed on this cell\n` : "  clip-parity: every check passed on this cell (the script will say so too)\n") : "") +
      `  run: torchrun --standalone --nproc-per-node ${world} ${path}\n`,
  );
  return 0;
}

/**
 * `clip-parity list [matrices|subjects|models|checks|regimes]`, and `list cells --matrix M [--filter RE]
 * [--exclude RE] [--subject S]...`: the cell ids a run would run, one a line (as `vitest list` or
 * `pytest --collect-only`), the count on stderr.
 */
import { InputError } from "../harness/errors.ts";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS, OPTIMIZER_KNOWN_BAD_SUBJECTS, OPTIMIZER_SUBJECTS } from "../harness/registry/registry.ts";
import { ALL_REGIMES } from "../harness/gradients/regimes.ts";
import { CHECKS, RUN_CHECKS } from "../harness/checks/index.ts";
import { getModel, MODEL_NAMES } from "../harness/model/models.ts";
import { builtinMatrices } from "../matrix/index.ts";
import { listFrameworkSubjects } from "../harness/external/torch/frameworks.ts";
import { given, list, parseCommandLine, parseRegExp, str, type CommandSpec, type Values } from "./args.ts";
import { resolveMatrix } from "../matrix/index.ts";
import { selectCells, subjectsOf } from "../harness/run/policy.ts";
import { userSubjectNames } from "../harness/sandbox/isolated.ts";
import { cellId } from "../harness/cell/cell.ts";
import { escapeControls } from "../harness/util/controls.ts";

export const spec: CommandSpec = {
  name: "list",
  summary:
    "Lists what is built in: list [matrices|subjects|models|checks|regimes] (all of them without an argument). " +
    "`list matrices --coverage` adds what each matrix covers (matrix/coverage.ts): the requirements and the cases meeting each.",
  flags: {
    coverage: { type: "boolean", description: "with `list matrices`: the requirements each matrix meets and the cases meeting each" },
    matrix: { type: "string", value: "NAME|FILE", description: "with `list cells`: the matrix", default: "cpu" },
    subject: { type: "string", multiple: true, value: "NAME|PATH", description: "with `list cells`: subjects instead of the matrix's" },
    filter: { type: "string", value: "RE", description: "with `list cells`: only the ids matching RE (as run --filter)" },
    exclude: { type: "string", value: "RE", description: "with `list cells`: leave out the ids matching RE (as run --exclude)" },
  },
  positionals: "[matrices|subjects|models|checks|regimes|cells]",
};

export const LIST_SECTIONS = ["matrices", "subjects", "models", "checks", "regimes"] as const;

/** Rows as aligned columns, each as wide as its longest entry (a long subject name moves the next column, never into it). */
export function columns(rows: readonly (readonly string[])[]): string {
  const widths = rows.reduce<number[]>((w, row) => row.map((cell, i) => Math.max(w[i] ?? 0, cell.length)), []);
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ").trimEnd() + "\n").join("");
}

/** The ids of the cells a run of the matrix would run, after --subject, --filter and --exclude. */
async function listCells(v: Values, out: NodeJS.WritableStream): Promise<void> {
  const matrix = resolveMatrix(str(v, "matrix")!);
  const subjects = list(v, "subject");
  const filter = str(v, "filter") !== undefined ? parseRegExp(str(v, "filter")!, "--filter") : undefined;
  const exclude = str(v, "exclude") !== undefined ? parseRegExp(str(v, "exclude")!, "--exclude") : undefined;
  // as `run` selects: a user module's cells by either id (its path's, its name's: what the results show)
  const names = filter || exclude ? await userSubjectNames(subjectsOf(matrix, subjects)) : {};
  const cells = selectCells(matrix, { ...(subjects ? { subjects } : {}), ...(filter ? { filter } : {}), ...(exclude ? { exclude } : {}), names });
  for (const c of cells) out.write(`${escapeControls(cellId(c))}\n`);
  process.stderr.write(`${cells.length} cells of matrix ${matrix.name}\n`);
}

function section(what: (typeof LIST_SECTIONS)[number], out: NodeJS.WritableStream): void {
  switch (what) {
    case "matrices":
      out.write(columns(Object.entries(builtinMatrices()).map(([name, m]) => [name, `${m.cases.length} cases`, m.backend, m.description])));
      return;
    case "subjects":
      out.write(
        columns([
          ...[...CORRECT_SUBJECTS, ...KNOWN_BAD_SUBJECTS, ...OPTIMIZER_SUBJECTS, ...OPTIMIZER_KNOWN_BAD_SUBJECTS].map((name) => {
            const s = BUILTIN_SUBJECTS[name]!;
            const tag = CORRECT_SUBJECTS.includes(name) || OPTIMIZER_SUBJECTS.includes(name) ? `passes (${s.tolerance ?? "fp32"})` : `caught by ${s.catchBy?.join(", ")}`;
            return [name, tag, s.description];
          }),
          // Real frameworks' clips, run through the PyTorch adapter (npm run setup:torch): docs/frameworks.md.
          ...listFrameworkSubjects().map((f) => [f.spec, "framework (docs/frameworks.md)", f.description]),
        ]),
      );
      return;
    case "models":
      out.write(columns(MODEL_NAMES.map((name) => [name, getModel(name).totalParams.toLocaleString("en-US")])));
      return;
    case "checks":
      out.write(
        columns([
          ...[...CHECKS, ...RUN_CHECKS].map((c) => [c.id, c.description]),
          // Judged across a training run rather than one clip: `clip-parity resume`, not `run`.
          ["resume.equal", "a resumed run ends bitwise equal to the uninterrupted one (clip-parity resume)"],
        ]),
      );
      return;
    case "regimes":
      for (const r of ALL_REGIMES) out.write(`${r}\n`);
      return;
  }
}

/** The coverage tables of the built-in matrices, then what the regression cells add. */
async function coverageSection(out: NodeJS.WritableStream): Promise<void> {
  const { formatCoverage, matrixCoverage, regressionsCoverage } = await import("../matrix/coverage.ts");
  for (const m of Object.values(builtinMatrices())) out.write(formatCoverage(matrixCoverage(m)));
  out.write(regressionsCoverage());
}

export async function run(argv: string[]): Promise<number> {
  const out = process.stdout;
  const { values, positionals } = parseCommandLine(spec, argv);
  if (positionals.length > 1) throw new InputError(`list: takes at most one of ${LIST_SECTIONS.join(", ")}; got ${positionals.join(" ")}`);
  const what = positionals[0];
  if (what === "cells") {
    await listCells(values, out);
    return 0;
  }
  const cellFlags = ["subject", "filter", "exclude"].filter((f) => given(values, f)).concat(given(values, "matrix") ? ["matrix"] : []);
  if (cellFlags.length) throw new InputError(`list: --${cellFlags.join(", --")} go with \`list cells\`; got list ${argv.join(" ")}`);
  if (values.coverage) {
    if (what !== "matrices") throw new InputError(`list: --coverage goes with \`list matrices\`; got list ${argv.join(" ")}`);
    section("matrices", out);
    await coverageSection(out);
    return 0;
  }
  if (what === undefined) {
    for (const k of LIST_SECTIONS) {
      out.write(`${k}:\n`);
      section(k, out);
    }
    return 0;
  }
  if (!(LIST_SECTIONS as readonly string[]).includes(what)) throw new InputError(`list: "${what}" is not one of ${[...LIST_SECTIONS, "cells"].join(", ")}`);
  section(what as (typeof LIST_SECTIONS)[number], out);
  return 0;
}

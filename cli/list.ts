/** `clip-parity list [matrices|subjects|models|checks|regimes]`. */
import { InputError } from "../harness/errors.ts";
import { BUILTIN_SUBJECTS, CORRECT_SUBJECTS, KNOWN_BAD_SUBJECTS, OPTIMIZER_KNOWN_BAD_SUBJECTS, OPTIMIZER_SUBJECTS } from "../harness/subject/registry.ts";
import { ALL_REGIMES } from "../harness/gradients/regimes.ts";
import { CHECKS, RUN_CHECKS } from "../harness/checks/index.ts";
import { getModel, MODEL_NAMES } from "../harness/model/models.ts";
import { builtinMatrices } from "../matrix/index.ts";
import { listFrameworkSubjects } from "../harness/external/torch/frameworks.ts";
import { parseCommandLine, type CommandSpec } from "./args.ts";

export const spec: CommandSpec = {
  name: "list",
  summary:
    "Lists what is built in: list [matrices|subjects|models|checks|regimes] (all of them without an argument). " +
    "`list matrices --coverage` adds what each matrix covers (matrix/coverage.ts): the requirements and the cases meeting each.",
  flags: {
    coverage: { type: "boolean", description: "with `list matrices`: the requirements each matrix meets and the cases meeting each" },
  },
  positionals: "[matrices|subjects|models|checks|regimes]",
};

export const LIST_SECTIONS = ["matrices", "subjects", "models", "checks", "regimes"] as const;

function section(what: (typeof LIST_SECTIONS)[number], out: NodeJS.WritableStream): void {
  switch (what) {
    case "matrices":
      for (const [name, m] of Object.entries(builtinMatrices())) out.write(`${name.padEnd(10)} ${String(m.cases.length).padStart(5)} cases  ${m.backend}  ${m.description}\n`);
      return;
    case "subjects":
      for (const name of [...CORRECT_SUBJECTS, ...KNOWN_BAD_SUBJECTS, ...OPTIMIZER_SUBJECTS, ...OPTIMIZER_KNOWN_BAD_SUBJECTS]) {
        const s = BUILTIN_SUBJECTS[name]!;
        const tag = CORRECT_SUBJECTS.includes(name) || OPTIMIZER_SUBJECTS.includes(name) ? `passes (${s.tolerance ?? "fp32"})` : `caught by ${s.catchBy?.join(", ")}`;
        out.write(`${name.padEnd(20)} ${tag.padEnd(40)} ${s.description}\n`);
      }
      // Real frameworks' clips, run through the PyTorch adapter (npm run setup:torch): docs/frameworks.md.
      for (const f of listFrameworkSubjects()) out.write(`${f.spec.padEnd(20)} ${"framework (docs/frameworks.md)".padEnd(40)} ${f.description}\n`);
      return;
    case "models":
      for (const name of MODEL_NAMES) out.write(`${name.padEnd(18)} ${getModel(name).totalParams.toLocaleString("en-US").padStart(16)}\n`);
      return;
    case "checks":
      for (const c of [...CHECKS, ...RUN_CHECKS]) out.write(`${c.id.padEnd(18)} ${c.description}\n`);
      // Judged across a training run rather than one clip: `clip-parity resume`, not `run`.
      out.write(`${"resume.equal".padEnd(18)} a resumed run ends bitwise equal to the uninterrupted one (clip-parity resume)\n`);
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
  if (!(LIST_SECTIONS as readonly string[]).includes(what)) throw new InputError(`list: "${what}" is not one of ${LIST_SECTIONS.join(", ")}`);
  section(what as (typeof LIST_SECTIONS)[number], out);
  return 0;
}

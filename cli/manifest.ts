/** `clip-parity manifest`: every logical parameter of a model, its shape and kind, and its tie groups. */
import { getModel } from "../harness/model/models.ts";
import { parseCommand, str, type CommandSpec } from "./args.ts";

export const spec: CommandSpec = {
  name: "manifest",
  summary: "Lists every logical parameter of a model (name, kind, shape), its tie groups and its total.",
  flags: {
    model: { type: "string", value: "NAME", description: "clip-parity list models", required: true },
    json: { type: "boolean", description: "print the manifest as JSON" },
  },
};

export async function run(argv: string[]): Promise<number> {
  const v = parseCommand(spec, argv);
  const m = getModel(str(v, "model")!);
  const out = process.stdout;
  if (v.json) {
    out.write(JSON.stringify({ name: m.name, totalParams: m.totalParams, params: m.params, ties: m.ties }, null, 2) + "\n");
    return 0;
  }
  out.write(`${m.name}: ${m.description}\n`);
  for (const p of m.params) out.write(`  ${String(p.index).padStart(4)}  ${p.name.padEnd(44)} ${p.kind.padEnd(9)} [${p.shape.join(", ")}]\n`);
  for (const t of m.ties) out.write(`  tie: ${t.canonical} <- ${t.replicas.map((r) => r.fqn).join(", ")}\n`);
  out.write(`total: ${m.totalParams.toLocaleString("en-US")} logical parameters (${m.totalParams})\n`);
  return 0;
}

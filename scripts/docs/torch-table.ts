/**
 * What a PyTorch function gets right and wrong, per cell, as a Markdown table (docs/torch.md), from the
 * `--json` results of a run:
 *
 *   node bin/clip-parity.js run --matrix gpu4 --backend cpu --subject torch:torch.nn.utils:clip_grad_norm_ --json out/torch.json
 *   npx tsx scripts/docs/torch-table.ts out/torch.json > table.md
 *
 * Each failing cell gets a short diagnosis read from its checks (no PP reduction, two meshes, a
 * coefficient in bfloat16, float32 reduction error, ...); the full messages stay in the JSON.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

interface JsonCheck {
  id: string;
  status: "pass" | "fail" | "skip";
  message: string;
}
interface JsonCell {
  id: string;
  subject: string;
  layout: Record<string, number>;
  model: string;
  dtype: string;
  normType: number | string;
  regime: string;
  totalNorm: number | string | null;
  referenceNorm: number | string | null;
  checks: JsonCheck[];
  ranks: { rank: number; norm: number | string | null; error?: string }[];
  comm: { collectives: number }[];
  memory: { scratchPeakBytes: number }[];
}

const AXES = ["pp", "dp_replicate", "dp_shard", "cp", "tp", "ep"];
const layoutText = (l: Record<string, number>) => AXES.filter((a) => l[a] !== 1).map((a) => `${a}${l[a]}`).join(",") || "single";
const failing = (c: JsonCell) => c.checks.filter((x) => x.status === "fail");
const msg = (c: JsonCell, id: string) => c.checks.find((x) => x.id === id)?.message ?? "";
const fmt = (v: number | string | null) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(7)) : String(v));

/** A one-line diagnosis of a failing cell, from its check messages. */
export function diagnose(c: JsonCell): string {
  const fails = new Set(failing(c).map((x) => x.id));
  const raised = c.ranks.filter((r) => r.error);
  if (!fails.size) {
    // errors.nonfinite only asks that every rank raise: say so when some raised for another reason.
    const other = raised.filter((r) => !/non-?finite/i.test(r.error!));
    if (!other.length) return "";
    const e = other[0]!.error!;
    const why = /same mesh|different meshes/.test(e) ? "the two-meshes RuntimeError" : e.split(":")[0];
    return `passes because every rank raised, but rank(s) ${other.map((r) => r.rank).join(",")} raised ${why}, not the non-finite error`;
  }
  const notes: string[] = [];
  if (fails.has("liveness")) {
    const text = msg(c, "liveness");
    const head = text.split("\n")[0]!.replace(/[;:] its last output:?$/, "");
    const what = /what\(\):\s*(?:\[[^\]]*\]\s*)?(.*)/.exec(text)?.[1]?.trim();
    notes.push(/did not finish/.test(head) ? `hang: ${head.replace(/^the PyTorch adapter /, "")}` : `crash: ${head.replace(/^the PyTorch adapter /, "")}${what ? ` (${what})` : ""}`);
  }
  if (raised.length && !fails.has("liveness")) {
    const e = raised[0]!.error!;
    const what = /same mesh|different meshes/.test(e)
      ? "raises: parameters on two meshes (dense and expert) in one foreach/stack"
      : /mixed torch\.Tensor and DTensor/.test(e)
        ? "raises: plain tensors and DTensors mixed"
        : `raises ${e.split(":")[0]}`;
    const ranks = raised.length === c.ranks.length ? "every rank" : `rank(s) ${raised.map((r) => r.rank).join(",")}`;
    notes.push(`${what} (${ranks})`);
  }
  const norms = [...new Set(c.ranks.filter((r) => !r.error).map((r) => fmt(r.norm)))];
  if (fails.has("parity.ranks") || (c.layout.pp! > 1 && norms.length > 1)) {
    notes.push(`no PP reduction: each stage returns its own norm (${norms.join(" / ")}; reference ${fmt(c.referenceNorm)})`);
  } else if (fails.has("parity.norm") && !raised.length && !fails.has("liveness")) {
    const m = /relative error ([\d.e+-]+)/.exec(msg(c, "parity.norm"));
    const norm = Number(c.ranks[0]?.norm);
    const ref = Number(c.referenceNorm);
    if (m && Number(m[1]) < 1e-3) notes.push(`norm off by ${Number(m[1]).toExponential(1)} relative: ${c.dtype} reduction error beyond the ${c.dtype === "f32" ? "fp32" : "bf16"} class`);
    else if (c.layout.pp! > 1 && c.model.startsWith("deepseek") && norm > ref) {
      notes.push(`norm too large on every rank (${fmt(norm)}, reference ${fmt(ref)}): the MTP replica of tok_embeddings counted twice`);
    } else notes.push(msg(c, "parity.norm").split("\n")[0]!);
  }
  if (fails.has("errors.nonfinite")) {
    notes.push(
      fails.has("liveness")
        ? "the stage holding the non-finite gradient raises before the PP all_reduce; the other stages wait in it"
        : /not for the non-finite norm/.test(msg(c, "errors.nonfinite"))
          ? "errors.nonfinite: a rank raised another error than the non-finite one"
          : "the non-finite norm is seen on one stage only: the other stages do not raise",
    );
  }
  if (fails.has("parity.tensors") && !notes.length) notes.push(msg(c, "parity.tensors").split("\n")[0]!);
  for (const id of ["scaling.nonempty", "scaling.replicas", "memory.peak", "memory.leak", "comm.budget"]) {
    if (fails.has(id)) notes.push(`${id}: ${msg(c, id).split("\n")[0]}`);
  }
  return notes.join("; ");
}

/** The Markdown table: one row per cell, then a count per layout and model. */
export function torchTable(cells: readonly JsonCell[]): string {
  const out: string[] = [];
  out.push("| layout | model | dtype | norm | regime | result | failed checks | what differed |");
  out.push("|---|---|---|---|---|---|---|---|");
  for (const c of cells) {
    const f = failing(c).map((x) => x.id);
    out.push(
      `| ${layoutText(c.layout)} | ${c.model} | ${c.dtype} | ${c.normType} | ${c.regime} | ${f.length ? "FAIL" : "pass"} | ${f.join(", ") || "-"} | ${diagnose(c).replace(/\|/g, "\\|") || "-"} |`,
    );
  }
  out.push("");
  const groups = new Map<string, { pass: number; fail: number }>();
  for (const c of cells) {
    const k = `${layoutText(c.layout)} | ${c.model}`;
    const g = groups.get(k) ?? { pass: 0, fail: 0 };
    if (failing(c).length) g.fail++;
    else g.pass++;
    groups.set(k, g);
  }
  out.push("| layout | model | cells passed | cells failed |");
  out.push("|---|---|---|---|");
  for (const [k, g] of groups) out.push(`| ${k} | ${g.pass} | ${g.fail} |`);
  const total = cells.filter((c) => !failing(c).length).length;
  out.push("");
  out.push(`${cells.length} cells: ${total} passed, ${cells.length - total} failed.`);
  return out.join("\n") + "\n";
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const path = process.argv[2];
  if (!path) {
    process.stderr.write("usage: npx tsx scripts/docs/torch-table.ts RESULTS.json\n");
    process.exit(2);
  }
  const json = JSON.parse(readFileSync(path, "utf8")) as { cells: JsonCell[] };
  process.stdout.write(torchTable(json.cells));
}

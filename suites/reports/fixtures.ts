/**
 * Shared by the report suites: a small real run (llama3-debug cells, ~0.15 s each), synthetic result
 * files for the gate, the CLI run in-process with its output captured, and a small strict XML parser.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { vi } from "vitest";
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import { parseLayout } from "../../harness/layout/layout.ts";
import { runCell } from "../../harness/execute/cell.ts";
import { type Cell } from "../../harness/cell/cell.ts";
import { type CellResult } from "../../harness/results/types.ts";
import { summarize } from "../../harness/results/summary.ts";
import { type RunSummary } from "../../harness/results/types.ts";
import { main } from "../../cli/main.ts";
import { jsonReport } from "../../harness/results/json.ts";
import { parseResultFile, type CellJson, type ResultFile } from "../../harness/results/schema.ts";

export function tempDir(prefix = "clip-parity-reports-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** reference passes; hf-replicate fails parity, scaling, memory and comm; a skip-heavy zeros cell. */
export const SMALL_CELLS: Cell[] = [
  { subject: "reference", layout: parseLayout("dp_shard2"), model: "llama3-debug", dtype: "f32", normType: 2, regime: "active", seed: 0 },
  { subject: "reference", layout: parseLayout("single"), model: "llama3-debug", dtype: "bf16", normType: Infinity, regime: "inactive", seed: 0 },
  { subject: "hf-replicate", layout: parseLayout("dp_shard2"), model: "llama3-debug", dtype: "f32", normType: 2, regime: "active", seed: 0 },
  { subject: "hf-replicate", layout: parseLayout("single"), model: "llama3-debug", dtype: "bf16", normType: Infinity, regime: "inactive", seed: 0 },
];

let small: Promise<{ results: CellResult[]; summary: RunSummary }> | undefined;

/** The small run, once per test file. */
export function smallRun(): Promise<{ results: CellResult[]; summary: RunSummary }> {
  small ??= (async () => {
    const results: CellResult[] = [];
    for (const cell of SMALL_CELLS) results.push(await runCell(cell, { subject: BUILTIN_SUBJECTS[cell.subject] }));
    return { results, summary: summarize(results) };
  })();
  return small;
}

export async function smallReport(): Promise<ResultFile> {
  const { results, summary } = await smallRun();
  return parseResultFile(JSON.parse(JSON.stringify(jsonReport(results, summary))), "small run");
}

/** A tiny user matrix file (cpu, llama3-debug only) for CLI runs: 2 subjects x 3 cases. */
export function tinyMatrixFile(dir: string, name = "tiny"): string {
  const path = join(dir, `${name}.json`);
  writeFileSync(
    path,
    JSON.stringify({
      name,
      description: "report suites",
      backend: "cpu",
      subjects: ["reference", "hf-replicate"],
      cases: [
        { layout: "dp_shard2", model: "llama3-debug", dtype: "f32", norm: 2, regime: "active" },
        { layout: "single", model: "llama3-debug", dtype: "bf16", norm: "inf", regime: "inactive" },
        { layout: "tp2", model: "llama3-debug", dtype: "f32", norm: 1, regime: "zeros" },
      ],
    }),
  );
  return path;
}

/** Runs the CLI in this process; returns its exit status and what it printed. */
export async function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const out = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  });
  const err = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  const saved: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(env)) {
    saved[k] = process.env[k];
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  try {
    const code = await main(args);
    return { code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

// ---- synthetic result files for the gate ---------------------------------------------------------

export function synthCell(id: string, over: Partial<CellJson> = {}, ranks = 2): CellJson {
  const [subject = "s", layout = "dp_shard2"] = id.split("/");
  return {
    id,
    subject,
    layout: { ...parseLayout(layout) },
    model: "llama3-debug",
    dtype: "f32",
    normType: 2,
    regime: "active",
    seed: 0,
    maxNorm: 1,
    errorIfNonfinite: false,
    backend: "cpu",
    totalNorm: 3.5,
    referenceNorm: 3.5,
    clipCoef: 0.25,
    checks: [
      { id: "parity.norm", status: "pass", message: "" },
      { id: "memory.peak", status: "pass", message: "" },
      { id: "comm.budget", status: "pass", message: "" },
    ],
    ranks: Array.from({ length: ranks }, (_, rank) => ({ rank, norm: 3.5 })),
    memory: Array.from({ length: ranks }, (_, rank) => ({ rank, gradBytes: 4096, scratchPeakBytes: 1000, budgetBytes: 1 << 20, leakedBytes: 0 })),
    comm: Array.from({ length: ranks }, (_, rank) => ({ rank, collectives: 2, bytes: 16, byKind: { all_reduce: 2 } })),
    repro: `npx clip-parity cell --subject ${subject} --layout ${layout}`,
    durationMs: 5,
    ...over,
  };
}

export function synthFile(cells: CellJson[]): ResultFile {
  let failed = 0;
  for (const c of cells) if (c.checks.some((x) => x.status === "fail")) failed++;
  return { cells, summary: { cells: cells.length, passed: cells.length - failed, failed, skipped: 0 } };
}

// ---- a small strict XML parser ------------------------------------------------------------------

export interface XmlElement {
  name: string;
  attrs: Record<string, string>;
  children: XmlElement[];
  text: string;
}

const ENTITIES: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

function decode(text: string, where: number): string {
  return text.replace(/&([^;]*);?/g, (m, body: string) => {
    if (!m.endsWith(";")) throw new Error(`XML: bare "&" at ${where}`);
    if (body in ENTITIES) return ENTITIES[body];
    const num = /^#(\d+)$/.exec(body) ?? /^#x([0-9a-fA-F]+)$/.exec(body);
    if (num) return String.fromCodePoint(parseInt(num[1], body.startsWith("#x") ? 16 : 10));
    throw new Error(`XML: unknown entity &${body}; at ${where}`);
  });
}

/** Parses a whole document; throws on anything not well-formed (mismatched tags, raw "<" or "&", ...). */
export function parseXml(xml: string): XmlElement {
  let i = 0;
  const fail = (why: string): never => {
    throw new Error(`XML at ${i}: ${why}: ${JSON.stringify(xml.slice(i, i + 40))}`);
  };
  const skipMisc = () => {
    for (;;) {
      const ws = /^\s*/.exec(xml.slice(i))![0];
      i += ws.length;
      if (xml.startsWith("<?", i)) {
        const end = xml.indexOf("?>", i);
        if (end < 0) fail("unterminated declaration");
        i = end + 2;
      } else if (xml.startsWith("<!--", i)) {
        const end = xml.indexOf("-->", i);
        if (end < 0) fail("unterminated comment");
        i = end + 3;
      } else return;
    }
  };
  const NAME = /^[A-Za-z_][\w.:-]*/;
  const element = (): XmlElement => {
    if (xml[i] !== "<") fail("expected <");
    i++;
    const name = NAME.exec(xml.slice(i))?.[0] ?? fail("bad element name");
    i += name.length;
    const attrs: Record<string, string> = {};
    for (;;) {
      const ws = /^\s*/.exec(xml.slice(i))![0];
      i += ws.length;
      if (xml.startsWith("/>", i)) {
        i += 2;
        return { name, attrs, children: [], text: "" };
      }
      if (xml[i] === ">") {
        i++;
        break;
      }
      if (!ws) fail("attributes must be separated by space");
      const an = NAME.exec(xml.slice(i))?.[0] ?? fail("bad attribute name");
      i += an.length;
      if (xml[i] !== "=") fail("expected =");
      const q = xml[i + 1];
      if (q !== '"' && q !== "'") fail("attribute value must be quoted");
      const end = xml.indexOf(q, i + 2);
      if (end < 0) fail("unterminated attribute");
      const raw = xml.slice(i + 2, end);
      if (raw.includes("<")) fail("raw < in an attribute");
      if (an in attrs) fail(`duplicate attribute ${an}`);
      attrs[an] = decode(raw, i);
      i = end + 1;
    }
    const children: XmlElement[] = [];
    let text = "";
    for (;;) {
      if (i >= xml.length) fail(`unclosed <${name}>`);
      if (xml.startsWith("</", i)) {
        i += 2;
        const close = NAME.exec(xml.slice(i))?.[0];
        if (close !== name) fail(`</${close}> closes <${name}>`);
        i += name.length;
        const ws = /^\s*/.exec(xml.slice(i))![0];
        i += ws.length;
        if (xml[i] !== ">") fail("expected >");
        i++;
        return { name, attrs, children, text };
      }
      if (xml.startsWith("<!--", i)) {
        const end = xml.indexOf("-->", i);
        if (end < 0) fail("unterminated comment");
        i = end + 3;
      } else if (xml.startsWith("<![CDATA[", i)) {
        const end = xml.indexOf("]]>", i);
        if (end < 0) fail("unterminated CDATA");
        text += xml.slice(i + 9, end);
        i = end + 3;
      } else if (xml[i] === "<") {
        children.push(element());
      } else {
        const next = xml.indexOf("<", i);
        const raw = xml.slice(i, next < 0 ? xml.length : next);
        text += decode(raw, i);
        i += raw.length;
      }
    }
  };
  skipMisc();
  const root = element();
  skipMisc();
  if (i !== xml.length) fail("content after the root element");
  return root;
}

export function all(e: XmlElement, name: string): XmlElement[] {
  return e.children.filter((c) => c.name === name);
}

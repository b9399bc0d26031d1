/**
 * The layering of the top-level folders (issue 11): harness/ is the library and imports none of the
 * others; matrix/ (what to run) and reports/ (how to report it) depend on harness/ only, reports/ on
 * its result types alone; cli/ and suites/ sit on top. An import circle between folders fails here,
 * with the two files that close it.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..");
const FOLDERS = ["harness", "matrix", "reports", "cli", "bench", "examples", "scripts", "suites"];

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (name === "node_modules" || name.startsWith(".")) continue;
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (/\.(ts|mts|mjs|js)$/.test(name) && !name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

/** Every relative import of a file (static, re-export and dynamic), resolved to a repo path. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const specs = [...text.matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)].map((m) => m[1]!);
  return specs.map((s) => relative(ROOT, resolve(dirname(file), s)));
}

const top = (path: string) => path.split("/")[0]!;

const edges = new Map<string, Map<string, string>>(); // folder -> folder -> an example "file -> import"
for (const folder of FOLDERS) {
  for (const file of sources(join(ROOT, folder))) {
    const from = relative(ROOT, file);
    for (const to of importsOf(file)) {
      if (top(to) === folder || !FOLDERS.includes(top(to))) continue;
      const row = edges.get(folder) ?? new Map<string, string>();
      if (!row.has(top(to))) row.set(top(to), `${from} -> ${to}`);
      edges.set(folder, row);
    }
  }
}

describe("architecture: the top-level folders import each other without a circle", () => {
  it("harness/ (the library) imports no other top-level folder but native/", () => {
    expect([...(edges.get("harness")?.values() ?? [])]).toEqual([]);
  });

  it("reports/ depends on the result types only (harness/results, util, errors, layout formatting)", () => {
    const allowed = /^harness\/(results|util|errors\.ts|layout\/layout\.ts)/;
    const bad: string[] = [];
    for (const file of sources(join(ROOT, "reports"))) {
      for (const to of importsOf(file)) if (top(to) !== "reports" && !allowed.test(to)) bad.push(`${relative(ROOT, file)} -> ${to}`);
    }
    expect(bad).toEqual([]);
  });

  it("matrix/ imports only harness/", () => {
    expect([...(edges.get("matrix")?.keys() ?? [])].filter((f) => f !== "harness")).toEqual([]);
  });

  it("the folder graph has no cycle", () => {
    const cycles: string[] = [];
    const visit = (node: string, path: string[]) => {
      for (const [next, example] of edges.get(node) ?? []) {
        const at = path.indexOf(next);
        if (at >= 0) cycles.push(`${[...path.slice(at), next].join(" -> ")} (closed by ${example})`);
        else visit(next, [...path, next]);
      }
    };
    for (const f of FOLDERS) visit(f, [f]);
    expect(cycles).toEqual([]);
  });

  it("the graph has the edges the layering needs (the test sees imports at all)", () => {
    expect(edges.get("cli")?.has("harness")).toBe(true);
    expect(edges.get("reports")?.has("harness")).toBe(true);
    expect(edges.get("matrix")?.has("harness")).toBe(true);
  });
});

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

/**
 * Inside harness/ (issue 56): each sub-folder imports only the folders listed below it, by value or by
 * type, so there is no folder loop. The order is the house's plan, bottom up: helpers, the float rules,
 * the mesh, the models, the subject API, the backends, the world of ranks, the gradients, what a cell is,
 * its results, the checks, the judge, running one cell, the torch adapter, the subject registry, the
 * sandbox (pool, worker, seal), the jobs that run there (training, fuzz) and the matrix runner on top.
 */
const HARNESS_LAYERS = ["errors.ts", "util", "numerics", "layout", "model", "subject", "backend", "world", "gradients", "cell", "results", "checks", "judge", "execute", "external", "registry", "sandbox", "training", "fuzz", "run", "index.ts"];

/** harness/'s folder graph: sub-folder (or top-level file) -> the ones it imports, with an example import. */
function harnessFolderGraph(): Map<string, Map<string, string>> {
  const unit = (path: string) => path.split("/")[1]!;
  const graph = new Map<string, Map<string, string>>();
  for (const file of sources(join(ROOT, "harness"))) {
    const from = relative(ROOT, file);
    for (const to of importsOf(file)) {
      if (top(to) !== "harness" || unit(to) === unit(from)) continue;
      const row = graph.get(unit(from)) ?? new Map<string, string>();
      if (!row.has(unit(to))) row.set(unit(to), `${from} -> ${to}`);
      graph.set(unit(from), row);
    }
  }
  return graph;
}

const folderCircles = (graph: Map<string, Map<string, string>>) => circles(new Map([...graph].map(([k, row]) => [k, [...row.keys()]])));

describe("architecture: harness/'s sub-folders import each other without a loop", () => {
  const graph = harnessFolderGraph();

  it("the layer list names every sub-folder of harness/ (and its top-level files)", () => {
    const units = readdirSync(join(ROOT, "harness")).filter((n) => statSync(join(ROOT, "harness", n)).isDirectory() || /\.(ts|mjs)$/.test(n));
    expect(units.sort()).toEqual([...HARNESS_LAYERS].sort());
  });

  it("no folder loop, counting value and type imports", () => {
    expect(graph.get("run")?.size).toBeGreaterThan(5); // the test sees imports at all
    expect(folderCircles(graph)).toEqual([]);
  });

  it("each sub-folder imports only the layers below it", () => {
    const upward: string[] = [];
    for (const [from, row] of graph) {
      for (const [to, example] of row) if (HARNESS_LAYERS.indexOf(to) > HARNESS_LAYERS.indexOf(from)) upward.push(`${from} imports ${to}, a layer above it (${example})`);
    }
    expect(upward).toEqual([]);
  });

  it("fails on a loop: one import from a low folder to a high one closes a circle", () => {
    const withLoop = new Map([...graph].map(([k, row]) => [k, new Map(row)]));
    withLoop.set("util", new Map([...(withLoop.get("util") ?? []), ["run", "harness/util/x.ts -> harness/run/runner.ts"]]));
    expect(folderCircles(withLoop).some((c) => c.includes("run") && c.includes("util"))).toBe(true);
  });
});

/** Every file-level import circle among `files` (each once, from its least file), with the arrows that close it. */
function circles(graph: Map<string, string[]>): string[] {
  const found = new Set<string>();
  const onPath: string[] = [];
  const done = new Set<string>();
  const visit = (node: string) => {
    onPath.push(node);
    for (const next of graph.get(node) ?? []) {
      const at = onPath.indexOf(next);
      if (at >= 0) {
        const ring = onPath.slice(at);
        const start = ring.indexOf([...ring].sort()[0]!);
        found.add([...ring.slice(start), ...ring.slice(0, start), ring[start]].join(" -> "));
      } else if (!done.has(next)) visit(next);
    }
    onPath.pop();
    done.add(node);
  };
  for (const node of [...graph.keys()].sort()) if (!done.has(node)) visit(node);
  return [...found].sort();
}

/** Rust: `crate::a::b`, `use crate::{a, b::c}` and (inside a folder) `super::x` name modules of native/core/src, by file. */
function rustGraph(): Map<string, string[]> {
  const src = join(ROOT, "native", "core", "src");
  const files = (dir: string): string[] =>
    readdirSync(dir).flatMap((n) => (statSync(join(dir, n)).isDirectory() ? files(join(dir, n)) : n.endsWith(".rs") ? [join(dir, n)] : []));
  const moduleOf = (file: string) => relative(src, file).replace(/\.rs$/, "").replace(/\/mod$/, "").replace(/^lib$/, "crate");
  const all = files(src);
  const modules = new Set(all.map(moduleOf));
  const graph = new Map<string, string[]>();
  for (const file of all) {
    const from = moduleOf(file);
    // test modules and comments may name anything: only the code a build compiles counts
    const text = readFileSync(file, "utf8").replace(/#\[cfg\(test\)\][\s\S]*$/, "").replace(/\/\/.*$/gm, "");
    const named = new Set<string>();
    for (const m of text.matchAll(/crate::(?:\{([^}]*)\}|([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)?))/g)) {
      const parts = m[1] !== undefined ? m[1].split(",").map((s) => s.trim().split("::").slice(0, 2).join("/")) : [m[2]!.replace("::", "/")];
      for (const p of parts) {
        const mod = modules.has(p) ? p : p.split("/")[0]!;
        if (modules.has(mod) && mod !== from) named.add(mod);
      }
    }
    // inside cuda/: `super::device` is the sibling module cuda/device
    const parent = from.includes("/") ? from.slice(0, from.lastIndexOf("/")) : null;
    for (const m of text.matchAll(/super::([a-z_][a-z0-9_]*)/g)) if (parent && modules.has(`${parent}/${m[1]}`) && `${parent}/${m[1]}` !== from) named.add(`${parent}/${m[1]}`);
    graph.set(from, [...named]);
  }
  return graph;
}

describe("architecture: no file-level import circle", () => {
  it("TypeScript: no file imports, through any chain, a file that imports it", () => {
    const graph = new Map<string, string[]>();
    for (const folder of FOLDERS) {
      for (const file of sources(join(ROOT, folder))) graph.set(relative(ROOT, file), importsOf(file).filter((to) => FOLDERS.includes(top(to))));
    }
    expect(graph.size).toBeGreaterThan(100);
    expect(circles(graph)).toEqual([]);
  });

  it("Rust (native/core/src): no module uses, through any chain, a module that uses it", () => {
    const graph = rustGraph();
    expect(graph.get("store")?.length).toBeGreaterThan(0); // the test sees `crate::` paths at all
    expect(circles(graph)).toEqual([]);
  });

  it("finds a circle where there is one", () => {
    const graph = new Map([["a.ts", ["b.ts"]], ["b.ts", ["c.ts"]], ["c.ts", ["a.ts"]], ["d.ts", ["a.ts"]]]);
    expect(circles(graph)).toEqual(["a.ts -> b.ts -> c.ts -> a.ts"]);
  });
});

describe("architecture: the environment is read in one place", () => {
  it("harness/, matrix/, reports/ and cli/ read variables only through harness/util/env.ts", () => {
    const reads: string[] = [];
    for (const folder of ["harness", "matrix", "reports", "cli"]) {
      for (const file of sources(join(ROOT, folder))) {
        const path = relative(ROOT, file);
        if (path === "harness/util/env.ts") continue;
        readFileSync(file, "utf8")
          .split("\n")
          .forEach((line, i) => {
            if (/process\.env\.[A-Za-z_]|\benv\.[A-Z][A-Z0-9_]*\b|\benv\[["'`]/.test(line)) reads.push(`${path}:${i + 1}: ${line.trim()}`);
          });
      }
    }
    expect(reads).toEqual([]);
  });
});

describe("architecture: one public entry", () => {
  it("package.json exports harness/index.ts (the subject API and the library road) and no path behind it", async () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { exports: Record<string, string> };
    expect(pkg.exports).toEqual({ ".": "./harness/index.ts", "./package.json": "./package.json" });
    const entry = await import("../harness/index.ts");
    for (const name of ["defineSubject", "clipCoefficient", "normFromPowerSum", "NonFiniteNormError", "runMatrix", "parseLayout", "InputError"]) {
      expect(typeof (entry as Record<string, unknown>)[name], name).toBe("function");
    }
  });

  it("the entry exposes no backend internals: the subject API imports no backend or world module", () => {
    expect(importsOf(join(ROOT, "harness/subject/api.ts")).filter((to) => /^harness\/(backend|world|run)\//.test(to))).toEqual([]);
  });
});

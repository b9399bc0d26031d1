// Module loader hooks for subject modules (registered by bin/clip-parity.js and the cell workers,
// after tsx): a user's subject may live in any folder and import the harness by its package name.
//
// - resolve: `clip-parity/<path>` means this installation's <path>, wherever the importing file is
//   (a subject outside the repository has no node_modules/clip-parity to find).
// - load: a .ts or .js subject outside a `"type": "module"` package is still an ES module (the
//   README's examples use import/export); without this, Node would treat it as CommonJS.
import { fileURLToPath, pathToFileURL } from "node:url";
import { dirname, join, resolve as resolvePath, sep } from "node:path";
import { existsSync, readFileSync } from "node:fs";

const ROOT = resolvePath(dirname(fileURLToPath(import.meta.url)), "../..");
const PREFIX = "clip-parity/";

export async function resolve(specifier, context, next) {
  if (specifier === "clip-parity" || specifier.startsWith(PREFIX)) {
    const rest = specifier === "clip-parity" ? "harness/clip/api.ts" : specifier.slice(PREFIX.length);
    const path = join(ROOT, rest);
    if (!path.startsWith(ROOT + sep)) throw new Error(`${specifier}: not a path inside clip-parity`);
    return next(pathToFileURL(path).href, context);
  }
  return next(specifier, context);
}

/** The "type" of the package.json nearest to a file, as Node reads it ("commonjs" when there is none). */
function packageType(path) {
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    const pj = join(dir, "package.json");
    if (existsSync(pj)) {
      try {
        return JSON.parse(readFileSync(pj, "utf8")).type ?? "commonjs";
      } catch {
        return "commonjs";
      }
    }
    if (dirname(dir) === dir) return "commonjs";
  }
}

export async function load(url, context, next) {
  if (url.startsWith("file:") && /\.(ts|js)$/.test(new URL(url).pathname)) {
    const path = fileURLToPath(url);
    if (!path.startsWith(ROOT + sep) && !path.includes(`${sep}node_modules${sep}`) && packageType(path) !== "module") {
      return next(url, { ...context, format: "module" });
    }
  }
  return next(url, context);
}

// Module loader hooks for subject modules (registered by bin/clip-parity.js and the cell workers,
// after tsx): a user's subject may live in any folder and import the harness by its package name.
//
// - resolve: `clip-parity/<path>` means this installation's <path>, wherever the importing file is
//   (a subject outside the repository has no node_modules/clip-parity to find).
// - resolve: a module imported by a rank's instance of a subject module (`?clip-parity-rank=N`, registry.ts)
//   is that rank's own too, unless it is the harness's or a package's: ranks of one cell share no state.
// - load: a .ts or .js subject outside a `"type": "module"` package is still an ES module (the
//   README's examples use import/export); without this, Node would treat it as CommonJS.
import { fileURLToPath, pathToFileURL } from "node:url";
import { dirname, join, relative, resolve as resolvePath, sep } from "node:path";
import { existsSync, readFileSync } from "node:fs";

const ROOT = resolvePath(dirname(fileURLToPath(import.meta.url)), "../..");
const PREFIX = "clip-parity/";

const RANK_QUERY = "clip-parity-rank";
const HARNESS = join(ROOT, "harness") + sep;

function relativeToRoot(path) {
  return relative(ROOT, path).split(sep).join("/");
}

/** The rank query of a parent module's URL, or null. */
function rankOf(parentURL) {
  if (!parentURL || !parentURL.startsWith("file:")) return null;
  return new URL(parentURL).searchParams.get(RANK_QUERY);
}

/**
 * The judge's code (issue 41): a subject module may not import it, so that no subject can ask for the
 * answer it is judged against. Harness modules may (their exports are sealed in the worker; the judge runs
 * in a thread of its own), so the rule reads the importing module: one of a rank's instance of a subject
 * module (the rank query below), which every module of a subject's own files is.
 */
export const JUDGE_ONLY = [
  join(ROOT, "harness", "gradients", "reference.ts"),
  join(ROOT, "harness", "judge", "judge.ts"),
  join(ROOT, "harness", "judge", "judge-worker.ts"),
  join(ROOT, "harness", "backend", "native.ts"), // it holds the reference's kernels
];

/** Why `specifier` (a subject's import of `path`, one of JUDGE_ONLY) is refused. */
export function judgeOnlyRefusal(specifier, path) {
  return `${specifier}: ${relativeToRoot(path)} is the judge's code (the reference a cell is judged against); a subject module may not import it`;
}

export async function resolve(specifier, context, next) {
  const resolved = await resolveOwn(specifier, context, next);
  if (resolved.url.startsWith("file:") && JUDGE_ONLY.includes(fileURLToPath(new URL(resolved.url))) && rankOf(context.parentURL) !== null) {
    throw new Error(judgeOnlyRefusal(specifier, fileURLToPath(new URL(resolved.url))));
  }
  const rank = rankOf(context.parentURL);
  if (rank === null || !resolved.url.startsWith("file:")) return resolved;
  const url = new URL(resolved.url);
  const path = fileURLToPath(url);
  if (path.startsWith(HARNESS) || path.includes(`${sep}node_modules${sep}`) || url.searchParams.has(RANK_QUERY)) return resolved;
  url.searchParams.set(RANK_QUERY, rank);
  return { ...resolved, url: url.href };
}

async function resolveOwn(specifier, context, next) {
  if (specifier === "clip-parity" || specifier.startsWith(PREFIX)) {
    const rest = specifier === "clip-parity" ? "harness/index.ts" : specifier.slice(PREFIX.length);
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

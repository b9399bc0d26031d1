/**
 * Every harness module a worker may run, imported before the realm is sealed (seal.ts), so that each is
 * loaded, and its exports frozen, before any subject code can import and change it. The PyTorch adapter
 * (external/: its subjects run in torchrun, driven from the main thread) is not worker code.
 */
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HARNESS = fileURLToPath(new URL("..", import.meta.url));
const NOT_WORKER_CODE = ["external", join("judge", "judge.ts"), join("judge", "judge-worker.ts"), join("sandbox", "worker.ts")];

function modulePaths(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (NOT_WORKER_CODE.includes(relative(HARNESS, path))) return [];
    if (e.isDirectory()) return modulePaths(path);
    return e.name.endsWith(".ts") && !e.name.endsWith(".d.ts") ? [path] : [];
  });
}

/** The namespaces of every worker-side harness module, in a stable order. */
export async function harnessModules(): Promise<object[]> {
  const paths = modulePaths(HARNESS).sort();
  return Promise.all(paths.map((p) => import(pathToFileURL(p).href) as Promise<object>));
}

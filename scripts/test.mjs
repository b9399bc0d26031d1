#!/usr/bin/env node
// `npm test [-- --matrix NAME|FILE] [--backend cpu|cuda|meta] [vitest args...]`.
// vitest refuses flags it does not know, so the matrix and backend travel as environment variables.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const args = process.argv.slice(2);
const env = { ...process.env };
const rest = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const take = (name) => {
    if (a === `--${name}`) return args[++i];
    if (a.startsWith(`--${name}=`)) return a.slice(name.length + 3);
    return undefined;
  };
  const matrix = take("matrix");
  if (matrix !== undefined) { env.CLIP_PARITY_MATRIX = matrix; continue; }
  const backend = take("backend");
  if (backend !== undefined) { env.CLIP_PARITY_BACKEND = backend; continue; }
  const report = take("report");
  if (report !== undefined) { env.CLIP_PARITY_REPORT = report; continue; }
  const out = take("out");
  if (out !== undefined) { env.CLIP_PARITY_OUT = out; continue; }
  rest.push(a);
}

const matrix = env.CLIP_PARITY_MATRIX ?? "cpu";
if (/^gpu\d+$/.test(matrix) && !env.CLIP_PARITY_BACKEND) {
  let present = false;
  let message = "the native addon is not built";
  try {
    const status = createRequire(import.meta.url)("../native/index.cjs").cudaStatus();
    present = status.present;
    message = status.message;
  } catch {}
  if (!present) {
    console.error(
      `clip-parity: matrix ${matrix} needs CUDA, which is not available here (${message}).\n` +
        `To run the same cells on the CPU backend: npm test -- --matrix ${matrix} --backend cpu`,
    );
    process.exit(2);
  }
  env.CLIP_PARITY_BACKEND = "cuda";
}

// vitest's package exports do not include vitest.mjs: find it beside its package.json.
const vitest = join(dirname(createRequire(import.meta.url).resolve("vitest/package.json")), "vitest.mjs");
const r = spawnSync(process.execPath, [vitest, "run", ...rest], { stdio: "inherit", env });
process.exit(r.status ?? 1);

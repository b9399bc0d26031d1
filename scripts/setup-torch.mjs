#!/usr/bin/env node
// `npm run setup:torch [-- --torchtitan] [--python PATH]`: installs PyTorch from PyPI into .venv/ (ignored by
// git) for the `torch:<module>:<function>` subjects and the agreement test (adapters/torch).
//
// Why the full wheel and not a CPU-only one: PyPI serves one Linux x86_64 torch wheel, built for CUDA, and
// its libtorch_cuda.so / libtorch.so name the CUDA libraries (cublas, cudnn, nccl, ...) as DT_NEEDED, so
// `pip install --no-deps torch` installs but `import torch` fails ("libcublasLt.so.*[0-9] not found") even
// on a CPU-only machine. The CPU-only wheels live on another index that this project's machines do not
// reach. So this installs `torch` with its dependencies (about 3 GB downloaded, 5.3 GB installed, about
// 2.5 minutes here) plus numpy (torch.distributed.tensor.debug imports it). The CUDA libraries are unused
// on a machine without a GPU; with one, the same venv drives NCCL.
//
// Environment: CLIP_PARITY_TORCH_SPEC (default below) picks the torch requirement; CLIP_PARITY_PYTHON the
// interpreter (default python3, at least 3.10). --torchtitan also installs torchtitan's clip_grad_norm_
// (torchtitan without its training dependencies: only what torchtitan.distributed.utils imports).
import { spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const venv = join(root, ".venv");
const py = join(venv, "bin", "python");
export const TORCH_SPEC = process.env.CLIP_PARITY_TORCH_SPEC ?? "torch==2.15.0";
const TORCHTITAN = ["torchtitan==0.3.0", "spmd_types==0.2.3"];

const args = process.argv.slice(2);
const withTitan = args.includes("--torchtitan");
const pyArg = args.indexOf("--python");
const python = pyArg >= 0 ? args[pyArg + 1] : (process.env.CLIP_PARITY_PYTHON ?? "python3");
for (const a of args) {
  if (!["--torchtitan", "--python", python].includes(a)) {
    console.error(`setup:torch: unknown argument "${a}" (allowed: --torchtitan, --python PATH)`);
    process.exit(2);
  }
}

function run(cmd, argv, what) {
  const t0 = Date.now();
  console.log(`setup:torch: ${what}: ${cmd} ${argv.join(" ")}`);
  const r = spawnSync(cmd, argv, { stdio: "inherit", cwd: root });
  if (r.error || r.status !== 0) {
    console.error(`setup:torch: ${what} failed (${r.error?.message ?? `exit ${r.status}`})`);
    process.exit(1);
  }
  return (Date.now() - t0) / 1000;
}

const started = Date.now();
const version = spawnSync(python, ["-c", "import sys; print('%d.%d' % sys.version_info[:2])"], { encoding: "utf8" });
if (version.status !== 0) {
  console.error(`setup:torch: cannot run ${python} (${version.error?.message ?? version.stderr.trim()}); set CLIP_PARITY_PYTHON or pass --python PATH`);
  process.exit(2);
}
const [maj, min] = version.stdout.trim().split(".").map(Number);
if (maj < 3 || (maj === 3 && min < 10)) {
  console.error(`setup:torch: ${python} is Python ${version.stdout.trim()}; torch needs 3.10 or newer`);
  process.exit(2);
}
if (!existsSync(py)) run(python, ["-m", "venv", venv], "create .venv");
const pip = ["-m", "pip", "install", "--disable-pip-version-check"];
const torchS = run(py, [...pip, TORCH_SPEC, "numpy"], "install torch");
let titanS = 0;
if (withTitan) {
  // torchtitan's own requirements (datasets, wandb, tensorboard, ...) are for training, not for its
  // clip_grad_norm_: install it without them, plus tyro, which torchtitan.config imports.
  titanS = run(py, [...pip, "--no-deps", ...TORCHTITAN], "install torchtitan (no training deps)");
  titanS += run(py, [...pip, "tyro"], "install tyro");
}
const check = spawnSync(
  py,
  [
    "-c",
    "import json, importlib.util as u, torch, torch.distributed as d, torch.distributed.tensor.debug\n" +
      "t = u.find_spec('torchtitan') is not None\n" +
      "print(json.dumps({'torch': torch.__version__, 'gloo': d.is_gloo_available(), 'cuda': torch.cuda.is_available(), 'torchtitan': t}))",
  ],
  { encoding: "utf8", cwd: root },
);
if (check.status !== 0) {
  console.error(`setup:torch: torch was installed but does not import:\n${check.stderr.trim().split("\n").slice(-5).join("\n")}`);
  process.exit(1);
}
const info = JSON.parse(check.stdout.trim().split("\n").pop());
const record = {
  ...info,
  spec: TORCH_SPEC,
  installSeconds: { torch: torchS, torchtitan: titanS, total: (Date.now() - started) / 1000 },
  at: new Date().toISOString(),
};
writeFileSync(join(venv, "clip-parity-torch.json"), JSON.stringify(record, null, 2) + "\n");
console.log(`setup:torch: torch ${info.torch} in .venv (gloo ${info.gloo}, cuda ${info.cuda}) in ${record.installSeconds.total.toFixed(0)} s`);

#!/usr/bin/env node
// `npm run setup:torch [-- --torch-only] [--python PATH]`: installs PyTorch and the pinned frameworks from PyPI
// into .venv/ (ignored by git) for the `torch:` subjects, the agreement test and docs/frameworks.md.
//
// What: adapters/torch/requirements.txt (torch, numpy, transformers, accelerate, megatron-core, deepspeed,
// tyro), then adapters/torch/requirements-nodeps.txt without dependencies (torchtitan: its own
// requirements are for training, not for its clip). --torch-only installs torch and numpy alone (the pins
// of requirements.txt); --torchtitan is accepted for old scripts (torchtitan is always installed now).
//
// Why the full torch wheel and not a CPU-only one: PyPI serves one Linux x86_64 torch wheel, built for CUDA,
// and its libtorch_cuda.so / libtorch.so name the CUDA libraries (cublas, cudnn, nccl, ...) as DT_NEEDED, so
// `pip install --no-deps torch` installs but `import torch` fails ("libcublasLt.so.*[0-9] not found") even
// on a CPU-only machine. The CPU-only wheels live on another index that this project's machines do not
// reach. So this installs `torch` with its dependencies (about 3 GB downloaded, 5.3 GB installed, about
// 2.5 minutes here); the frameworks add about 45 s. The CUDA libraries are unused on a machine without a
// GPU; with one, the same venv drives NCCL.
//
// Environment: CLIP_PARITY_TORCH_SPEC replaces the torch pin (the frameworks are then not installed: their
// pins were checked against the pinned torch); CLIP_PARITY_PYTHON the interpreter (default python3, at
// least 3.10).
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const venv = join(root, ".venv");
const py = join(venv, "bin", "python");
const REQUIREMENTS = join(root, "adapters", "torch", "requirements.txt");
const NODEPS = join(root, "adapters", "torch", "requirements-nodeps.txt");

/** The pins of a requirements file, comments and blank lines dropped. */
function pins(path) {
  return readFileSync(path, "utf8")
    .split("\n")
    .map((l) => l.replace(/#.*/, "").trim())
    .filter(Boolean);
}
const pinned = pins(REQUIREMENTS);
const torchPin = pinned.find((p) => /^torch==/.test(p));
const numpyPin = pinned.find((p) => /^numpy==/.test(p));
export const TORCH_SPEC = process.env.CLIP_PARITY_TORCH_SPEC || torchPin;

const args = process.argv.slice(2);
const torchOnly = args.includes("--torch-only") || Boolean(process.env.CLIP_PARITY_TORCH_SPEC);
const pyArg = args.indexOf("--python");
const python = pyArg >= 0 ? args[pyArg + 1] : (process.env.CLIP_PARITY_PYTHON ?? "python3");
for (const a of args) {
  if (!["--torchtitan", "--torch-only", "--python", python].includes(a)) {
    console.error(`setup:torch: unknown argument "${a}" (allowed: --torch-only, --python PATH)`);
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
const torchS = run(py, [...pip, TORCH_SPEC, numpyPin], "install torch");
let frameworksS = 0;
if (!torchOnly) {
  frameworksS = run(py, [...pip, "-r", REQUIREMENTS], "install the pinned frameworks (adapters/torch/requirements.txt)");
  frameworksS += run(py, [...pip, "--no-deps", "-r", NODEPS], "install torchtitan without its training deps (adapters/torch/requirements-nodeps.txt)");
}
const check = spawnSync(
  py,
  [
    "-c",
    "import json, importlib.util as u, torch, torch.distributed as d, torch.distributed.tensor.debug\n" +
      "import importlib.metadata as md\n" +
      "def v(n):\n    try:\n        return md.version(n)\n    except md.PackageNotFoundError:\n        return None\n" +
      "print(json.dumps({'torch': torch.__version__, 'gloo': d.is_gloo_available(), 'cuda': torch.cuda.is_available(), 'packages': {n: v(n) for n in ('torchtitan', 'transformers', 'accelerate', 'megatron-core', 'deepspeed')}}))",
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
  installSeconds: { torch: torchS, frameworks: frameworksS, total: (Date.now() - started) / 1000 },
  at: new Date().toISOString(),
};
writeFileSync(join(venv, "clip-parity-torch.json"), JSON.stringify(record, null, 2) + "\n");
const fw = Object.entries(info.packages).filter(([, v]) => v).map(([k, v]) => `${k} ${v}`).join(", ");
console.log(`setup:torch: torch ${info.torch} in .venv (gloo ${info.gloo}, cuda ${info.cuda}${fw ? `; ${fw}` : ""}) in ${record.installSeconds.total.toFixed(0)} s`);

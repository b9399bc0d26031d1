#!/usr/bin/env bash
# Regenerates native/core/src/cuda/kernels.ptx (the PTX shipped for machines with a CUDA driver but
# no NVRTC) from kernels.cu with NVRTC 12.0, installed from PyPI into .nvrtc/12.0 when missing.
# Run after every change to kernels.cu (a Rust test fails until the PTX matches the source).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.nvrtc/12.0
if [ ! -e "$dir/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
  python3 -m pip install --quiet --target "$dir" nvidia-cuda-nvrtc-cu12==12.0.140
fi
CLIP_PARITY_NVRTC="$PWD/$dir/nvidia/cuda_nvrtc/lib" \
  cargo run --release --quiet --manifest-path native/Cargo.toml -p clip-parity-core --example cuda_ptx

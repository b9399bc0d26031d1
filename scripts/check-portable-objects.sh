#!/usr/bin/env bash
# The addon must run on any x86-64 CPU, not only the one that built it: CORE-MATH (core-math-sys) is
# compiled with -march=$TARGET_CPU, which .cargo/config.toml pins to the x86-64 baseline. This fails when
# its archive holds AVX/AVX-512/FMA instructions (what -march=native gives on a newer CPU). Our own Rust
# SIMD paths are not checked here: they sit behind runtime feature detection (native/core/src/simd.rs).
set -euo pipefail
target_dir="${1:-native/target}"
[ "$(uname -m)" = x86_64 ] || { echo "not x86-64: nothing to check"; exit 0; }
mapfile -t archives < <(find "$target_dir" -name 'libcore-math.a' -path '*release*' -newer .cargo/config.toml)
[ "${#archives[@]}" -gt 0 ] || { echo "no libcore-math.a under $target_dir built after .cargo/config.toml" >&2; exit 1; }
for a in "${archives[@]}"; do
  n=$(objdump -d "$a" | grep -cE '%[yz]mm[0-9]|vfmadd|vfmsub|vfnmadd' || true)
  if [ "$n" -gt 0 ]; then
    echo "$a: $n AVX/FMA instructions; CORE-MATH was built for this CPU, not the x86-64 baseline (TARGET_CPU)" >&2
    exit 1
  fi
  echo "$a: baseline x86-64 ($(objdump -d "$a" | grep -c '^ ' ) instructions, none AVX/FMA)"
done

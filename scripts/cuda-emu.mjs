#!/usr/bin/env node
// Builds the CPU emulation of the CUDA kernels (native/core/src/cuda/emu_main.cpp + kernels.cu) with
// the host C++ compiler into .clip-parity/cuda-emu/ and prints the library's path. With
// CLIP_PARITY_CUDA_EMU=<that path>, the addon's cuda backend runs its kernels on the CPU: the
// cuda code path end to end on a machine without a GPU (slow; tests only; docs/cuda.md).
//
//   node scripts/cuda-emu.mjs            -> prints the path (builds when the sources changed)
//   CLIP_PARITY_CUDA_EMU=$(node scripts/cuda-emu.mjs) clip-parity cell ... --backend cuda
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SOURCES = ["kernels.cu", "emu.hpp", "emu_main.cpp"];

/** Builds (or finds) the emulation library; returns its absolute path. Throws when no C++ compiler works. */
export function buildCudaEmu() {
  const src = join(root, "native/core/src/cuda");
  const texts = SOURCES.map((f) => readFileSync(join(src, f), "utf8"));
  const id = createHash("sha256").update(texts.join("\0")).digest("hex").slice(0, 16);
  const dir = join(root, ".clip-parity/cuda-emu");
  const out = join(dir, `libcp_cuda_emu-${id}.so`);
  if (existsSync(out)) return out;
  mkdirSync(dir, { recursive: true });
  SOURCES.forEach((f, i) => writeFileSync(join(dir, f), texts[i]));
  const tmp = `${out}.${process.pid}.tmp`;
  const cxx = process.env.CXX || "c++";
  execFileSync(cxx, ["-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math", "-o", tmp, join(dir, "emu_main.cpp")], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  renameSync(tmp, out);
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    console.log(buildCudaEmu());
  } catch (err) {
    console.error(`cuda-emu: ${err.stderr?.toString() || err.message}`);
    process.exit(1);
  }
}

/**
 * What the harness reads from its environment, in one place, so that every part agrees on it (a CI check
 * that accepted only CI=true once skipped whole suites under CI=1) and one table says what each variable
 * does. harness/, matrix/, reports/ and cli/ read the environment only through here (suites/architecture
 * checks it); the suites' own switches are listed for the README but read by the suites.
 */

/** Every variable the library and the command line read, with what it does. Empty counts as unset. */
export const ENV_VARS = {
  CI: "set (and not 0/false): no golden update, the CI fuzz seed",
  CLIP_PARITY_MATRIX: "npm test: the matrix the suite runs (default cpu; `npm test -- --matrix NAME` sets it)",
  CLIP_PARITY_BACKEND: "npm test: the backend (default: the matrix's own; `--backend` sets it)",
  CLIP_PARITY_REPORT: "npm test: reporters to write after the suite (`--report` sets it)",
  CLIP_PARITY_OUT: "npm test: the reports' folder (`--out` sets it)",
  CLIP_PARITY_GOLDEN: "npm test: the matrix suite's golden mode (default check when golden/<matrix>.json exists for the backend, CI or not; `--golden` sets it)",
  CLIP_PARITY_GOLDEN_DIR: "where golden/<matrix>.json files are (default golden/)",
  CLIP_PARITY_SCRATCH: "where resume and train write checkpoints (default /dev/shm with 4 GiB free, else the OS temp dir)",
  CLIP_PARITY_FUZZ_SEED: "the fuzz seed when --seed is not given (default the CI seed)",
  CLIP_PARITY_ENV_CACHE: "where environments for pinned framework releases (--with PKG==VER) are built and kept (default $XDG_CACHE_HOME/clip-parity/envs, else ~/.cache/clip-parity/envs)",
  CLIP_PARITY_ENV_CACHE_GB: "the size cap of that cache in GB (default 40): least recently used environments are evicted past it",
  XDG_CACHE_HOME: "the parent of that cache's default folder",
  OMP_NUM_THREADS: "threads of each torch rank (default 1; the agreement test's 2)",
  PYTHONPATH: "kept for the torch ranks, after the project root (so that torch:<module> subjects import)",
} as const;

/** The CLIP_PARITY_TORCH_* family: the torch subjects' options (harness/external/torch/options.ts lists them). */
export const TORCH_ENV_PREFIX = "CLIP_PARITY_TORCH_";

/** Read by the suites, the scripts or the native addon themselves: listed here so that one table has them all. */
export const OTHER_ENV_VARS = {
  CLIP_PARITY_REQUIRE_TORCH: "suites: the torch suites fail instead of skipping when torch is missing (CI sets it)",
  CLIP_PARITY_UPDATE_GOLDEN: "suites/torch/agreement.test.ts rewrites its golden (never in CI)",
  CLIP_PARITY_FUZZ_RUNS: "suites/fuzz/subjects.test.ts: cases per subject (default 300)",
  CLIP_PARITY_WEAKENINGS: "suites/weakenings/weakenings.test.ts: set (not 0), each kept weakening is applied in a temporary copy of the tree and its test seen to fail (a minute or so); unset, each is only checked to apply",
  CLIP_PARITY_PARITY: "suites/cuda: full or quick (default full on a GPU, quick on the emulation)",
  CLIP_PARITY_CUDA_EMU: "native addon: its cuda backend runs its kernels on the CPU emulation at this path (scripts/cuda-emu.mjs)",
  CLIP_PARITY_NVRTC: "native addon: where libnvrtc is (CI sets it to the PyPI copy)",
  CLIP_PARITY_NATIVE_TEST_PANIC: "native addon: make one store call panic (its refusal test, native/CONTRACT.md)",
  CLIP_PARITY_SIMD: "native addon: caps the SIMD path its kernels take (portable, avx2 or avx512; default the best the CPU has), e.g. to measure the AVX2 path on an AVX-512 machine",
} as const;

export type EnvName = keyof typeof ENV_VARS;

/** A variable's value; unset and empty are the same (undefined). */
export function envValue(name: EnvName, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const v = env[name];
  return v === undefined || v === "" ? undefined : v;
}

/** The set, non-empty CLIP_PARITY_TORCH_* variables, as [name, value]. */
export function torchEnvEntries(env: NodeJS.ProcessEnv = process.env): [string, string][] {
  return Object.entries(env).filter((e): e is [string, string] => e[0].startsWith(TORCH_ENV_PREFIX) && e[1] !== undefined && e[1] !== "");
}

/** Whether we run under CI: CI set to anything but "", "0" and "false" (any case), as CI services set it. */
export function isCI(env: NodeJS.ProcessEnv = process.env): boolean {
  const v = envValue("CI", env);
  return v !== undefined && v !== "0" && v.toLowerCase() !== "false";
}

/** Threads of each torch rank: OMP_NUM_THREADS when set, else `fallback`. */
export function ompThreads(fallback: string, env: NodeJS.ProcessEnv = process.env): string {
  return envValue("OMP_NUM_THREADS", env) ?? fallback;
}

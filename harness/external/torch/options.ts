/**
 * How the PyTorch adapter is run: one typed options object. Defaults come from this file; the
 * CLIP_PARITY_TORCH_* environment variables only override them, and are parsed in one place
 * (`torchOptionsFromEnv`) so that a bad value is refused with the variable's name and value instead of
 * being read as a default somewhere deep in a run.
 */
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { InputError } from "../../errors.ts";
import type { ToleranceClass } from "../../subject/api.ts";
import { TORCH_ENV_PREFIX, torchEnvEntries } from "../../util/env.ts";

export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const ADAPTER_DIR = join(PROJECT_ROOT, "adapters", "torch");
export const ADAPTER = join(ADAPTER_DIR, "adapter.py");
export const SETUP_HINT = "run `npm run setup:torch` (installs torch and the pinned frameworks from PyPI into .venv/, about 5 GB, 2-3 minutes)";

export interface TorchOptions {
  /** The interpreter that has torch (and the frameworks). */
  python: string;
  /** Per cell: the clip itself takes about a second, so this only catches a rank stuck outside any collective. */
  cellTimeoutS: number;
  /**
   * How long a rank waits in one of the target's collectives before it raises c10d's timeout error: a hang
   * (a rank that skipped a collective its peers issued) is reported after this long, not after cellTimeoutS.
   * A peer busy for longer than this before its collective reads as a hang too: the clip step of a cpu cell
   * takes about 0.5 s.
   */
  collectiveTimeoutS: number;
  /** Launching torchrun and importing torch on every rank. */
  startTimeoutS: number;
  /** The tolerance class claimed for every cell; "auto": fp32-accum for float32 gradients (torch accumulates them in float32), bf16 otherwise (the norm comes back in the gradients' dtype). */
  tolerance: ToleranceClass | "auto";
  /** Passed as `foreach` to targets whose convention asks for the option; null: not passed. */
  foreach: boolean | null;
  /** "cpu": gloo on CPU even when every rank could have a GPU. */
  device: "auto" | "cpu";
  /** Print where each session logs. */
  verbose: boolean;
  /** Keep session directories (logs, every job's files) after the run. */
  keep: boolean;
  /** Variables the ranks get besides the adapter's own (a release environment's TORCH_EXTENSIONS_DIR). */
  env?: Readonly<Record<string, string>>;
}

export const DEFAULT_TORCH_OPTIONS: Readonly<TorchOptions> = Object.freeze({
  python: join(PROJECT_ROOT, ".venv", "bin", "python"),
  cellTimeoutS: 180,
  collectiveTimeoutS: 10,
  startTimeoutS: 300,
  tolerance: "auto",
  foreach: null,
  device: "auto",
  verbose: false,
  keep: false,
});

/** Every variable read here, plus the two the project sets for other programs (setup, the adapter). */
const KNOWN = {
  PYTHON: "python",
  TIMEOUT_S: "cellTimeoutS",
  COLLECTIVE_TIMEOUT_S: "collectiveTimeoutS",
  START_TIMEOUT_S: "startTimeoutS",
  TOLERANCE: "tolerance",
  FOREACH: "foreach",
  DEVICE: "device",
  VERBOSE: "verbose",
  KEEP: "keep",
} as const;
/** The CLIP_PARITY_TORCH_* names this file reads, without the prefix. */
export const TORCH_OPTION_NAMES: readonly string[] = Object.keys(KNOWN);
const NOT_OURS = new Set(["SPEC", "PG_TIMEOUT_S"]);
const PREFIX = TORCH_ENV_PREFIX;

function seconds(name: string, v: string): number {
  const n = Number(v);
  if (!(n > 0) || !Number.isFinite(n)) throw new InputError(`${name}: "${v}" is not a positive number of seconds`);
  return n;
}

function flag(name: string, v: string): boolean {
  const t = v.toLowerCase();
  if (t === "1" || t === "true" || t === "yes") return true;
  if (t === "0" || t === "false" || t === "no") return false;
  throw new InputError(`${name}: "${v}" is not one of 1, true, yes, 0, false, no`);
}

/**
 * The options: defaults, then each CLIP_PARITY_TORCH_* variable that is set and not empty. An unknown
 * CLIP_PARITY_TORCH_* name is refused too: a misspelt override would otherwise be silently ignored.
 */
export function torchOptionsFromEnv(env: NodeJS.ProcessEnv = process.env, base: Readonly<TorchOptions> = DEFAULT_TORCH_OPTIONS): TorchOptions {
  const o: TorchOptions = { ...base };
  for (const [name, raw] of torchEnvEntries(env)) {
    const key = name.slice(PREFIX.length);
    if (NOT_OURS.has(key)) continue;
    if (!Object.hasOwn(KNOWN, key)) {
      throw new InputError(`${name}: not a clip-parity setting (known: ${Object.keys(KNOWN).map((k) => PREFIX + k).join(", ")})`);
    }
    switch (KNOWN[key as keyof typeof KNOWN]) {
      case "python":
        o.python = raw;
        break;
      case "cellTimeoutS":
        o.cellTimeoutS = seconds(name, raw);
        break;
      case "collectiveTimeoutS":
        o.collectiveTimeoutS = seconds(name, raw);
        break;
      case "startTimeoutS":
        o.startTimeoutS = seconds(name, raw);
        break;
      case "tolerance":
        if (raw !== "exact" && raw !== "fp32" && raw !== "fp32-accum" && raw !== "bf16" && raw !== "auto") throw new InputError(`${name}: "${raw}" is not exact, fp32, fp32-accum, bf16 or auto`);
        o.tolerance = raw;
        break;
      case "foreach":
        o.foreach = flag(name, raw);
        break;
      case "device":
        if (raw !== "cpu" && raw !== "auto") throw new InputError(`${name}: "${raw}" is not cpu or auto`);
        o.device = raw;
        break;
      case "verbose":
        o.verbose = flag(name, raw);
        break;
      case "keep":
        o.keep = flag(name, raw);
        break;
    }
  }
  return o;
}


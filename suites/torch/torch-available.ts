/**
 * Whether the PyTorch suites run here. They need torch in .venv (`npm run setup:torch`) or in
 * CLIP_PARITY_TORCH_PYTHON. Without it they are skipped with a message saying how to install it, except
 * when torch is required: CLIP_PARITY_REQUIRE_TORCH=1 (.ci/run sets it after installing torch), or a CI run
 * (isCI: CI=true, CI=1, ...) with a torch install recorded by setup:torch (.venv/clip-parity-torch.json).
 * Then a missing torch fails.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { PROJECT_ROOT, torchOptionsFromEnv } from "../../harness/external/torch/options.ts";
import { isCI } from "../../harness/util/env.ts";
import { probeTorch, type TorchInfo } from "../../harness/external/torch/subject.ts";

export interface TorchAvailability {
  info: TorchInfo | null;
  /** Why torch is not usable, or null. */
  reason: string | null;
  required: boolean;
  /** Run the suite: torch is there, or it is required (and its absence must fail). */
  run: boolean;
  skipNote: string;
}

/** Whether torch is required here; pure, so that the CI rule is testable. */
export function torchRequired(env: NodeJS.ProcessEnv, setupRecorded: boolean): boolean {
  return env.CLIP_PARITY_REQUIRE_TORCH === "1" || (isCI(env) && setupRecorded);
}

let cached: TorchAvailability | undefined;

export function torchAvailability(): TorchAvailability {
  if (cached) return cached;
  let info: TorchInfo | null = null;
  let reason: string | null = null;
  try {
    info = probeTorch(torchOptionsFromEnv().python, {}, "the PyTorch tests");
  } catch (err) {
    reason = (err as Error).message;
  }
  const required = torchRequired(process.env, existsSync(join(PROJECT_ROOT, ".venv", "clip-parity-torch.json")));
  const run = info !== null || required;
  const skipNote = run ? "" : ` [skipped: ${reason}]`;
  if (!run) process.stderr.write(`clip-parity: PyTorch suites skipped: ${reason}\n`);
  cached = { info, reason, required, run, skipNote };
  return cached;
}

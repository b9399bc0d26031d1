/**
 * Scratch folders the main thread owns for the jobs it hands to workers (issue 41): created here, named in
 * the job, and removed here when the job ends however it ends (a result, a crash, a replaced worker), and
 * when the process exits or is interrupted. A subject that exits or hangs after a checkpoint was written
 * leaves nothing behind.
 */
import { mkdtempSync, rmSync, statfsSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { envValue } from "./env.ts";
import { InputError } from "../errors.ts";
import { onExitOrSignal } from "./exit.ts";

/**
 * Where a checkpoint that is not kept goes: $CLIP_PARITY_SCRATCH when set (it must be a folder), else
 * /dev/shm when it is a filesystem with at least 4 GiB free (a RAM disk: the shards' fsyncs cost
 * nothing), else the OS temporary directory.
 */
export function scratchRoot(): string {
  const env = envValue("CLIP_PARITY_SCRATCH");
  if (env) {
    let isDir = false;
    try {
      isDir = statSync(env).isDirectory();
    } catch (err) {
      throw new InputError(`CLIP_PARITY_SCRATCH: ${env} cannot be used for scratch checkpoints (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
    if (!isDir) throw new InputError(`CLIP_PARITY_SCRATCH: ${env} is not a folder (it names where scratch checkpoints go)`);
    return env;
  }
  try {
    const s = statfsSync("/dev/shm");
    if (s.bavail * s.bsize >= 4 * 2 ** 30) return "/dev/shm";
  } catch {
    // no /dev/shm here
  }
  return tmpdir();
}

const owned = new Set<string>();

function removeAll(): void {
  for (const dir of owned) rmSync(dir, { recursive: true, force: true });
  owned.clear();
}

/** A new scratch folder under scratchRoot(), removed by releaseScratch or when the process ends. */
export function ownScratch(prefix: string): string {
  const root = scratchRoot();
  let dir: string;
  try {
    dir = mkdtempSync(join(root, prefix));
  } catch (err) {
    throw new InputError(`scratch folder: cannot create one in ${root} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  if (owned.size === 0) onExitOrSignal(removeAll);
  owned.add(dir);
  return dir;
}

export function releaseScratch(dir: string): void {
  owned.delete(dir);
  rmSync(dir, { recursive: true, force: true });
}

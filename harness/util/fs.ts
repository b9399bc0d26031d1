/**
 * The one way the harness writes a file: whole or not at all. Every report, result file, golden,
 * checkpoint index and job file goes through here, so a crash or a full disk never leaves a
 * half-written file where a reader (CI, `gate`, a resumed run) would trust it.
 */
import { accessSync, closeSync, constants, existsSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { InputError } from "../errors.ts";

/** fsync of a directory makes a rename in it durable; some filesystems refuse it, which is harmless. */
export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, "r");
    fsyncSync(fd);
  } catch {
    // not supported here: the rename is still atomic, only its durability is the filesystem's
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Writes `data` to `path` through a temporary file in the same directory, fsynced, then renamed over
 * `path` (atomic on POSIX), creating parent directories. A failure leaves `path` as it was. `mode`
 * (before the umask) is the new file's: 0o755 for a script a user runs.
 */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o644): void {
  const abs = resolve(path);
  const dir = dirname(abs);
  mkdirSync(dir, { recursive: true });
  const tmp = `${abs}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
  const fd = openSync(tmp, "w", mode);
  try {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw err;
  }
  closeSync(fd);
  try {
    renameSync(tmp, abs);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
  fsyncDir(dir);
}

/** JSON with non-finite numbers as "inf" / "-inf" / "nan" strings (JSON has no Infinity). */
export function toJsonText(value: unknown, indent = 2): string {
  return (
    JSON.stringify(
      value,
      (_, x) => (typeof x === "number" && !Number.isFinite(x) ? (Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf") : x),
      indent,
    ) + "\n"
  );
}

export function writeJsonAtomic(path: string, value: unknown, indent = 2): void {
  writeFileAtomic(path, toJsonText(value, indent));
}

/**
 * Refuses, before any work, an output path that cannot be written: a directory where a file is
 * wanted, a parent that is a file, or a folder without write permission. `flag` names the option.
 */
export function assertWritableFile(path: string, flag: string): void {
  const abs = resolve(path);
  if (existsSync(abs)) {
    const st = statSync(abs);
    if (st.isDirectory()) throw new InputError(`${flag}: ${path} is a directory; give a file path`);
    try {
      accessSync(abs, constants.W_OK);
    } catch {
      throw new InputError(`${flag}: ${path} exists and is not writable`);
    }
    return;
  }
  assertWritableDir(dirname(abs), flag, path);
}

/** The same for an output folder (it may not exist yet: its nearest existing ancestor must be a writable folder). */
export function assertWritableDir(path: string, flag: string, shown = path): void {
  let dir = resolve(path);
  for (;;) {
    if (existsSync(dir)) {
      if (!statSync(dir).isDirectory()) throw new InputError(`${flag}: ${shown} cannot be written: ${dir} is a file, not a directory`);
      try {
        accessSync(dir, constants.W_OK);
      } catch {
        throw new InputError(`${flag}: ${shown} cannot be written: ${dir} is not writable`);
      }
      return;
    }
    const up = dirname(dir);
    if (up === dir) return;
    dir = up;
  }
}

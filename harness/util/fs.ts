/**
 * The one way the harness writes a file: whole or not at all. Every report, result file, golden,
 * checkpoint index and job file goes through here, so a crash or a full disk never leaves a
 * half-written file where a reader (CI, `gate`, a resumed run) would trust it.
 */
import { accessSync, closeSync, constants, existsSync, fsyncSync, lstatSync, mkdirSync, openSync, readlinkSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { ClipParityError, InputError } from "../errors.ts";

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
 * The kernel's views of open files (/proc/self/fd/1 -> a pipe): written in place, never renamed over. Not
 * /dev as a whole: /dev/shm holds regular files (resume's scratch), which stay atomic; a device there is
 * told by its file type.
 */
const KERNEL_VIEWS = ["/proc/"];

/** This process's own descriptor that a path names (/dev/stdout, /dev/fd/3, /proc/self/fd/1), if it names one. */
function ownDescriptor(path: string): number | undefined {
  if (path === "/dev/stdout") return 1;
  if (path === "/dev/stderr") return 2;
  const m = /^\/(?:dev\/fd|proc\/self\/fd|proc\/\d+\/fd)\/(\d+)$/.exec(path);
  if (!m || (path.startsWith("/proc/") && !path.startsWith("/proc/self/") && !path.startsWith(`/proc/${process.pid}/`))) return undefined;
  return Number(m[1]);
}

/**
 * Written to one of this process's descriptors: stdout and stderr through their streams, so that the
 * file keeps its place among the lines already written there (a socket cannot be reopened by path anyway).
 */
function writeDescriptor(fd: number, data: string | Uint8Array): void {
  if (fd === 1) process.stdout.write(data);
  else if (fd === 2) process.stderr.write(data);
  else {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
  }
}

/**
 * Where a write to `path` lands, and how: a symlink is followed to its end (a dangling one to the file it
 * names), so that the link stays a link and its target is replaced atomically; a device, a FIFO, a socket
 * or anything reached through /proc is written in place through `path`.
 */
function writeTarget(abs: string): { path: string; inPlace: boolean; fd?: number } {
  let at = abs;
  for (let hops = 0; hops < 40; hops++) {
    const fd = ownDescriptor(at);
    if (fd !== undefined) return { path: abs, inPlace: true, fd };
    if (KERNEL_VIEWS.some((prefix) => at.startsWith(prefix))) return { path: abs, inPlace: true };
    let st;
    try {
      st = lstatSync(at);
    } catch {
      return { path: at, inPlace: false }; // nothing there yet: a new file
    }
    if (!st.isSymbolicLink()) return st.isFile() || st.isDirectory() ? { path: at, inPlace: false } : { path: abs, inPlace: true };
    at = resolve(dirname(at), readlinkSync(at));
  }
  throw new InputError(`${abs}: too many levels of symbolic links`);
}

/**
 * Writes `data` to `path` through a temporary file in the same directory, fsynced, then renamed over
 * `path` (atomic on POSIX), creating parent directories. A failure leaves `path` as it was. `mode`
 * (before the umask) is the new file's: 0o755 for a script a user runs.
 *
 * Atomic for regular files only: a symlink's target is written (the link is kept, never renamed over),
 * and a device, a FIFO or a socket (/dev/stdout, a named pipe) is written in place, since renaming over it
 * would replace it with a regular file.
 */
export function writeFileAtomic(path: string, data: string | Uint8Array, mode = 0o644): void {
  try {
    writeUnchecked(path, data, mode);
  } catch (err) {
    throw writeError(path, err);
  }
}

/**
 * A failed write as one line naming the path and the system's reason (a full disk, a read-only or
 * missing folder), exit 2: a stack trace from inside fs says neither. Other errors pass through.
 */
export function writeError(path: string, err: unknown): unknown {
  const e = err as NodeJS.ErrnoException;
  if (err instanceof ClipParityError || typeof e?.code !== "string" || !e.code.startsWith("E")) return err;
  const why = WRITE_FAILURES[e.code] ?? e.message.replace(/,.*$/, "");
  return new ClipParityError("E_WRITE", `${path}: could not write it (${e.code}: ${why}); it is left as it was`, 2);
}

const WRITE_FAILURES: Record<string, string> = {
  ENOSPC: "no space left on the device",
  EDQUOT: "disk quota exceeded",
  EROFS: "read-only file system",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EIO: "input/output error",
  ENOENT: "a folder on the path does not exist",
  ENOTDIR: "a part of the path is a file, not a folder",
  EISDIR: "it is a folder",
};

function writeUnchecked(path: string, data: string | Uint8Array, mode: number): void {
  const target = writeTarget(resolve(path));
  if (target.fd !== undefined) {
    writeDescriptor(target.fd, data);
    return;
  }
  if (target.inPlace) {
    writeFileSync(target.path, data);
    return;
  }
  const abs = target.path;
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

/** The output path that means standard output (`--json -`). */
export const STDOUT_PATH = "-";

/** A command's output file: `-` is standard output; any other path is written by writeFileAtomic. */
export function writeOutputFile(path: string, data: string): void {
  if (path === STDOUT_PATH) process.stdout.write(data);
  else writeFileAtomic(path, data);
}

/** Where a command's text for people goes: stderr when its result file is standard output, so the two never mix. */
export function humanOutput(jsonPath: string | undefined): NodeJS.WriteStream {
  return jsonPath === STDOUT_PATH ? process.stderr : process.stdout;
}

/**
 * Refuses, before any work, an output path that cannot be written: a directory where a file is
 * wanted, a parent that is a file, or a folder without write permission (for a dangling symlink, those of
 * the file it names, where the write will land). `flag` names the option.
 * `-` (standard output) is always writable.
 */
export function assertWritableFile(path: string, flag: string): void {
  if (path === STDOUT_PATH) return;
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
  // nothing there yet, or a dangling link: the folder that must take the new file is the one where the links end
  assertWritableDir(dirname(writeTarget(abs).path), flag, path);
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

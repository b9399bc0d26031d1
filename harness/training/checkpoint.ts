/**
 * The sharded checkpoint of the resume checks (SPEC §9; the format is documented in docs/checkpoint.md).
 *
 * A checkpoint is a directory: one safetensors file per rank of the layout it was written from
 * (`rank-00000.safetensors`, ...) and `index.json`, which says for every logical parameter its global
 * shape, dtype and optimizer step count, and for every file its rank, size, sha256 and the chunks it
 * holds: which block (start, len) of which canonical name, for which role (param, exp_avg,
 * exp_avg_sq). A replicated block is written once (by the lowest rank holding it); a tied parameter
 * is written once, under its canonical name, from its canonical copy, and loaded into every copy.
 *
 * Writing: every shard is written atomically (temporary file, fsync, rename), then index.json the
 * same way: index.json is the commit point, removed first and written last, so a directory whose
 * writing was interrupted has no index and is refused.
 *
 * Reading is two phases. `readCheckpoint` validates everything first (index schema, model, dtype,
 * run, chunk coverage, and per file: presence, size, safetensors header, header against index,
 * sha256) and throws a CheckpointError naming the file and the problem. Only then does
 * `loadCheckpoint` change tensors: it reads each file once and copies the intersection of each chunk
 * with each destination block (resharding to any layout).
 */
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { z } from "zod";
import type { DType, Tensor } from "../subject/api.ts";
import type { Backend } from "../backend/backend.ts";
import { layoutFields } from "../layout/schema.ts";
import { formatLayout, sameLayout, validateLayout, worldSize, type Layout } from "../layout/layout.ts";
import type { ModelManifest } from "../model/manifest.ts";
import type { Block } from "../model/plan.ts";
import { ADAMW, PARAM_INIT } from "./adamw.ts";
import { CheckpointError } from "./errors.ts";
import { InputError } from "../errors.ts";
import { ROLES, roleTensor, type CopyState, type Role, type TrainState } from "../judge/train-state.ts";
import { fsyncDir, writeFileAtomic } from "../util/fs.ts";

export const INDEX_FILE = "index.json";
export const FORMAT = "clip-parity-checkpoint";
export const FORMAT_VERSION = 1;

/** The safetensors dtype names of the harness dtypes. */
const ST_DTYPE: Record<DType, "F32" | "BF16" | "F16"> = { f32: "F32", bf16: "BF16", f16: "F16" };

export function shardFileName(rank: number): string {
  return `rank-${String(rank).padStart(5, "0")}.safetensors`;
}
const SHARD_RE = /^rank-\d{5,}\.safetensors$/;

/** The tensor name inside a shard file: `<role>/<canonical name>`. */
export function chunkKey(role: Role, name: string): string {
  return `${role}/${name}`;
}


const dims = z.array(z.number().int().nonnegative());
const layoutSchema = z.strictObject(layoutFields);

export const indexSchema = z.strictObject({
  format: z.literal(FORMAT),
  version: z.literal(FORMAT_VERSION),
  step: z.number().int().nonnegative(),
  model: z.string().min(1),
  dtype: z.enum(["f32", "bf16", "f16"]),
  seed: z.number().int().nonnegative(),
  layout: layoutSchema,
  layoutSpec: z.string(),
  world: z.number().int().positive(),
  run: z.strictObject({
    subject: z.string(),
    normType: z.union([z.number().positive(), z.literal("inf")]),
    regime: z.string(),
  }),
  optimizer: z.strictObject({
    name: z.literal("AdamW"),
    lr: z.number(),
    betas: z.tuple([z.number(), z.number()]),
    eps: z.number(),
    weightDecay: z.number(),
    foreach: z.literal(false),
    stateDtype: z.literal("F32"),
  }),
  paramInit: z.strictObject({ prefix: z.string(), step: z.number().int(), dtype: z.literal("F32"), exp: z.number().int() }),
  tensors: z.record(
    z.string(),
    z.strictObject({ shape: dims, dtype: z.literal("F32"), optimizerStep: z.number().int().nonnegative(), copies: z.array(z.string()).min(1) }),
  ),
  files: z.array(
    z.strictObject({
      file: z.string().regex(SHARD_RE),
      rank: z.number().int().nonnegative(),
      bytes: z.number().int().nonnegative(),
      sha256: z.string().regex(/^[0-9a-f]{64}$/),
      chunks: z.array(z.strictObject({ key: z.string(), name: z.string(), role: z.enum(ROLES), start: dims, len: dims })),
    }),
  ),
});
export type CheckpointIndex = z.infer<typeof indexSchema>;

/** What a run records about itself in the index (informative; not checked on load). */
export interface WriterInfo {
  model: ModelManifest;
  dtype: DType;
  seed: number;
  subject: string;
  normType: number;
  regime: string;
}

/** sha256 of a file, read in 4 MiB pieces. */
export function sha256File(path: string): string {
  const h = createHash("sha256");
  const buf = Buffer.allocUnsafe(1 << 22);
  const fd = openSync(path, "r");
  try {
    for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) h.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return h.digest("hex");
}

const blockKey = (name: string, b: Block) => `${name}|${b.start.join(",")}|${b.len.join(",")}`;
const numelOf = (xs: readonly number[]) => xs.reduce((a, b) => a * b, 1);

/** Writes `s` (after s.step steps) as a checkpoint in `dir`; returns the index written. */
export function saveCheckpoint(backend: Backend, s: TrainState, dir: string, info: WriterInfo): CheckpointIndex {
  try {
    return writeCheckpoint(backend, s, dir, info);
  } catch (err) {
    throw writeFailure(err, dir) ?? err;
  }
}

/** Errno codes of a write that the user can fix (a full disk, a read-only or foreign path): exit 2, one line. */
const WRITE_ERRORS: Record<string, string> = {
  ENOSPC: "no space left on device",
  EDQUOT: "disk quota exceeded",
  EROFS: "read-only file system",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOTDIR: "a part of the path is a file, not a folder",
  EISDIR: "a folder stands where a file goes",
  EEXIST: "a file stands where a folder goes",
};
/** The same failures as the native writer words them (Rust's io::Error text, os error numbers of Linux). */
const NATIVE_WRITE_ERRORS: [RegExp, string][] = [
  [/os error 28\b|No space left/i, "ENOSPC"],
  [/os error 122\b|quota exceeded/i, "EDQUOT"],
  [/os error 30\b|Read-only file system/i, "EROFS"],
  [/os error 13\b|Permission denied/i, "EACCES"],
];

/** A write failure as bad input naming the folder and the cause, or null for anything else (a bug). */
function writeFailure(err: unknown, dir: string): InputError | null {
  if (err instanceof InputError) return err;
  if (!(err instanceof Error)) return null;
  // a Node fs error has the errno code; the native writer's (napi's code "GenericFailure") says it in words
  const own = (err as NodeJS.ErrnoException).code;
  const code = own !== undefined && Object.hasOwn(WRITE_ERRORS, own) ? own : NATIVE_WRITE_ERRORS.find(([re]) => re.test(err.message))?.[1];
  if (!code || !Object.hasOwn(WRITE_ERRORS, code)) return null;
  return new InputError(`--dir ${dir}: cannot write the checkpoint: ${WRITE_ERRORS[code]} (${code}); nothing of it was kept as a checkpoint`);
}

/**
 * The files of `abs` this writer may replace or remove: those a clip-parity checkpoint there lists, and
 * shards it wrote whose index never landed. A folder that holds anything else is refused (exit 2): a
 * user's folder is never written into, and no file the harness did not write is ever deleted.
 */
function claimCheckpointDir(abs: string, dir: string): Set<string> {
  if (!existsSync(abs)) {
    mkdirSync(abs, { recursive: true });
    return new Set();
  }
  if (!statSync(abs).isDirectory()) throw new InputError(`--dir ${dir}: is a file, not a folder; give a new folder, an empty one or a checkpoint's`);
  const names = readdirSync(abs);
  const ours = new Set<string>();
  let listed: Set<string> | null = null;
  if (names.includes(INDEX_FILE)) {
    try {
      listed = new Set(readIndex(abs).files.map((f) => f.file));
    } catch {
      listed = null;
    }
  }
  for (const name of names) {
    if (name === INDEX_FILE && listed) ours.add(name);
    else if (SHARD_RE.test(name) && (listed?.has(name) || isOurShard(join(abs, name)))) ours.add(name);
  }
  const foreign = names.filter((n) => !ours.has(n));
  if (foreign.length && !listed) {
    throw new InputError(
      `--dir ${dir}: the folder is not empty and is not a clip-parity checkpoint (it holds ${foreign.slice(0, 3).map((n) => JSON.stringify(n)).join(", ")}` +
        `${foreign.length > 3 ? `, ... ${foreign.length} in all` : ""}); give a new folder, an empty one or a checkpoint's`,
    );
  }
  return ours; // in a checkpoint's folder, files it does not list stay untouched
}

/** Whether a shard file was written by this checkpoint writer: its safetensors metadata says so. */
function isOurShard(path: string): boolean {
  try {
    const fd = openSync(path, "r");
    try {
      const len = Buffer.alloc(8);
      if (readSync(fd, len, 0, 8, 0) !== 8) return false;
      const n = Number(len.readBigUInt64LE(0));
      if (n > 1 << 24) return false;
      const header = Buffer.alloc(n);
      if (readSync(fd, header, 0, n, 8) !== n) return false;
      return (JSON.parse(header.toString("utf8")) as { __metadata__?: { format?: string } }).__metadata__?.format === FORMAT;
    } finally {
      closeSync(fd);
    }
  } catch {
    return false;
  }
}

function writeCheckpoint(backend: Backend, s: TrainState, dir: string, info: WriterInfo): CheckpointIndex {
  const abs = resolve(dir);
  const replaceable = claimCheckpointDir(abs, dir);
  for (let rank = 0; rank < s.world; rank++) {
    const file = shardFileName(rank);
    if (existsSync(join(abs, file)) && !replaceable.has(file)) throw new InputError(`--dir ${dir}: ${file} is there and was not written by clip-parity; it is not overwritten`);
  }
  rmSync(join(abs, INDEX_FILE), { force: true }); // the commit point goes first

  const tensors: CheckpointIndex["tensors"] = {};
  const copiesOf = new Map<string, Set<string>>();
  const stepOf = new Map<string, number>();
  for (const copies of s.ranks) {
    for (const c of copies) {
      (copiesOf.get(c.lp.name) ?? copiesOf.set(c.lp.name, new Set()).get(c.lp.name)!).add(c.lp.fqn);
      const seen = stepOf.get(c.lp.name);
      if (seen !== undefined && seen !== c.steps) {
        throw new Error(`internal: copies of ${c.lp.name} have optimizer step counts ${seen} and ${c.steps}`);
      }
      stepOf.set(c.lp.name, c.steps);
    }
  }
  for (const p of info.model.params) {
    const copies = copiesOf.get(p.name);
    if (!copies) throw new Error(`internal: ${p.name} is on no rank of ${formatLayout(s.layout)}`);
    tensors[p.name] = { shape: [...p.shape], dtype: "F32", optimizerStep: stepOf.get(p.name)!, copies: [...copies].sort((a, b) => (a === p.name ? -1 : b === p.name ? 1 : a.localeCompare(b))) };
  }

  const written = new Set<string>();
  const files: CheckpointIndex["files"] = [];
  const layoutSpec = formatLayout(s.layout);
  for (let rank = 0; rank < s.world; rank++) {
    const entries: { name: string; tensor: Tensor }[] = [];
    const chunks: CheckpointIndex["files"][number]["chunks"] = [];
    for (const c of s.ranks[rank]!) {
      const { lp } = c;
      if (!lp.canonical || lp.numel === 0) continue;
      const k = blockKey(lp.name, lp.block);
      if (written.has(k)) continue; // a replicated block: written once, by the lowest rank
      written.add(k);
      for (const role of ROLES) {
        const key = chunkKey(role, lp.name);
        entries.push({ name: key, tensor: roleTensor(c, role) });
        chunks.push({ key, name: lp.name, role, start: [...lp.block.start], len: [...lp.block.len] });
      }
    }
    const file = shardFileName(rank);
    const path = join(abs, file);
    backend.saveSafetensors(path, entries, {
      format: FORMAT,
      version: String(FORMAT_VERSION),
      rank: String(rank),
      step: String(s.step),
      model: info.model.name,
      layout: layoutSpec,
    });
    files.push({ file, rank, bytes: statSync(path).size, sha256: sha256File(path), chunks });
  }
  const keep = new Set(files.map((f) => f.file));
  // the previous checkpoint's shards this one does not reuse (another layout); never a file it did not write
  for (const f of replaceable) if (SHARD_RE.test(f) && !keep.has(f)) rmSync(join(abs, f), { force: true });

  const index: CheckpointIndex = {
    format: FORMAT,
    version: FORMAT_VERSION,
    step: s.step,
    model: info.model.name,
    dtype: info.dtype,
    seed: info.seed,
    layout: { ...s.layout },
    layoutSpec,
    world: s.world,
    run: { subject: info.subject, normType: info.normType === Infinity ? "inf" : info.normType, regime: info.regime },
    optimizer: {
      name: "AdamW",
      lr: ADAMW.lr,
      betas: [ADAMW.beta1, ADAMW.beta2],
      eps: ADAMW.eps,
      weightDecay: ADAMW.weightDecay,
      foreach: false,
      stateDtype: "F32",
    },
    paramInit: { prefix: PARAM_INIT.prefix, step: PARAM_INIT.step, dtype: "F32", exp: PARAM_INIT.exp },
    tensors,
    files,
  };
  fsyncDir(abs);
  writeFileAtomic(join(abs, INDEX_FILE), JSON.stringify(index, null, 1) + "\n");
  return index;
}

/** index.json parsed and checked against the schema (nothing else). */
export function readIndex(dir: string): CheckpointIndex {
  const path = join(resolve(dir), INDEX_FILE);
  if (!existsSync(path)) {
    const why = existsSync(resolve(dir)) ? "no index.json (not a checkpoint, or its writing was interrupted)" : "no such directory";
    throw new CheckpointError("bad-index", path, why);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new CheckpointError("bad-index", path, `not valid JSON: ${(err as Error).message}`);
  }
  const parsed = indexSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.slice(0, 3).map((i) => `${i.path.map(String).join(".") || "(top level)"}: ${i.message}`);
    throw new CheckpointError("bad-index", path, `not a ${FORMAT} v${FORMAT_VERSION} index: ${lines.join("; ")}`);
  }
  return parsed.data;
}

/** What the resuming run requires of a checkpoint. */
export interface Expectation {
  model: ModelManifest;
  dtype: DType;
  seed?: number;
  /** The layout it must have been written from (e.g. --layout with --from-existing). */
  layout?: Layout;
  /** The step it must have been written at (e.g. --save-at with --from-existing). */
  step?: number;
  /** The run it must come from: its gradients' norm type and regime (a resume with others is another run). */
  normType?: number;
  regime?: string;
}

function sameDims(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** The chunks of each (name, role) must tile the global tensor: in range, disjoint, covering every element. */
function checkCoverage(index: CheckpointIndex, indexPath: string): void {
  const byKey = new Map<string, { file: string; start: number[]; len: number[] }[]>();
  for (const f of index.files) {
    for (const c of f.chunks) {
      const t = index.tensors[c.name];
      if (!t) throw new CheckpointError("bad-index", indexPath, `${f.file} holds chunk "${c.key}" of "${c.name}", which is not in "tensors"`);
      if (c.key !== chunkKey(c.role, c.name)) throw new CheckpointError("bad-index", indexPath, `${f.file}: chunk key "${c.key}" should be "${chunkKey(c.role, c.name)}"`);
      const d = t.shape.length;
      if (c.start.length !== d || c.len.length !== d || c.start.some((s, k) => s + c.len[k]! > t.shape[k]!)) {
        throw new CheckpointError(
          "bad-index",
          indexPath,
          `${f.file}: chunk "${c.key}" start [${c.start.join(", ")}] len [${c.len.join(", ")}] is not inside shape [${t.shape.join(", ")}]`,
        );
      }
      const list = byKey.get(c.key) ?? byKey.set(c.key, []).get(c.key)!;
      for (const o of list) {
        const overlap = c.start.every((s, k) => Math.max(s, o.start[k]!) < Math.min(s + c.len[k]!, o.start[k]! + o.len[k]!));
        if (overlap) throw new CheckpointError("bad-index", indexPath, `chunk "${c.key}" in ${f.file} overlaps the one in ${o.file}`);
      }
      list.push({ file: f.file, start: c.start, len: c.len });
    }
  }
  for (const [name, t] of Object.entries(index.tensors)) {
    const total = numelOf(t.shape);
    for (const role of ROLES) {
      const key = chunkKey(role, name);
      const have = (byKey.get(key) ?? []).reduce((a, c) => a + numelOf(c.len), 0);
      if (have !== total) {
        throw new CheckpointError(
          "missing-chunk",
          indexPath,
          `the chunks of "${key}" hold ${have} of its ${total} elements (shape [${t.shape.join(", ")}]): a shard's chunk list is missing`,
        );
      }
    }
  }
}

/**
 * Validates a checkpoint completely, before anything is allocated or changed: returns its index or
 * throws a CheckpointError that names the file and the problem.
 */
export function readCheckpoint(backend: Backend, dir: string, expect: Expectation): CheckpointIndex {
  const abs = resolve(dir);
  const indexPath = join(abs, INDEX_FILE);
  const index = readIndex(abs);
  if (index.model !== expect.model.name) {
    throw new CheckpointError("model-mismatch", indexPath, `written for model ${index.model}; this run is for ${expect.model.name}`);
  }
  if (index.dtype !== expect.dtype) {
    throw new CheckpointError("dtype-mismatch", indexPath, `written by a run with ${index.dtype} gradients; this run has ${expect.dtype} gradients`);
  }
  if (expect.seed !== undefined && index.seed !== expect.seed) {
    throw new CheckpointError("run-mismatch", indexPath, `written by a run with seed ${index.seed}; this run has seed ${expect.seed}`);
  }
  const writtenNorm = index.run.normType === "inf" ? Infinity : index.run.normType;
  if (expect.normType !== undefined && writtenNorm !== expect.normType) {
    throw new CheckpointError("run-mismatch", indexPath, `written by a run with --norm ${index.run.normType}; this run has --norm ${expect.normType === Infinity ? "inf" : expect.normType}`);
  }
  if (expect.regime !== undefined && index.run.regime !== expect.regime) {
    throw new CheckpointError("run-mismatch", indexPath, `written by a run with --regime ${index.run.regime}; this run has --regime ${expect.regime}`);
  }
  if (expect.step !== undefined && index.step !== expect.step) {
    throw new CheckpointError("run-mismatch", indexPath, `written after step ${index.step}; this run resumes at step ${expect.step}`);
  }
  let layout: Layout;
  try {
    layout = validateLayout(index.layout);
  } catch (err) {
    throw new CheckpointError("bad-index", indexPath, `layout: ${(err as Error).message}`);
  }
  if (expect.layout && !sameLayout(layout, expect.layout)) {
    throw new CheckpointError("run-mismatch", indexPath, `written from layout ${formatLayout(layout)}; expected ${formatLayout(expect.layout)}`);
  }
  if (worldSize(layout) !== index.world || index.files.length !== index.world || index.files.some((f, r) => f.rank !== r || f.file !== shardFileName(r))) {
    throw new CheckpointError("bad-index", indexPath, `layout ${formatLayout(layout)} has ${worldSize(layout)} ranks: "files" must list ${shardFileName(0)} .. ${shardFileName(worldSize(layout) - 1)} in rank order (world ${index.world}, ${index.files.length} files)`);
  }
  for (const p of expect.model.params) {
    const t = index.tensors[p.name];
    if (!t) throw new CheckpointError("model-mismatch", indexPath, `has no tensor "${p.name}" of model ${expect.model.name}`);
    if (!sameDims(t.shape, p.shape)) {
      throw new CheckpointError("model-mismatch", indexPath, `tensor "${p.name}" has shape [${t.shape.join(", ")}]; model ${expect.model.name} says [${p.shape.join(", ")}]`);
    }
  }
  const names = new Set(expect.model.params.map((p) => p.name));
  for (const name of Object.keys(index.tensors)) {
    if (!names.has(name)) throw new CheckpointError("model-mismatch", indexPath, `tensor "${name}" is not a parameter of model ${expect.model.name}`);
  }
  checkCoverage(index, indexPath);

  for (const f of index.files) {
    const path = join(abs, f.file);
    if (!existsSync(path)) throw new CheckpointError("missing-shard", path, `listed in ${INDEX_FILE} (rank ${f.rank}) but not on disk`);
    const size = statSync(path).size;
    if (size < f.bytes) throw new CheckpointError("truncated", path, `${size} bytes on disk; ${INDEX_FILE} records ${f.bytes}`);
    if (size > f.bytes) throw new CheckpointError("size-mismatch", path, `${size} bytes on disk; ${INDEX_FILE} records ${f.bytes}`);
    let header: { name: string; dtype: DType; shape: number[] }[];
    try {
      header = backend.inspectSafetensors(path);
    } catch (err) {
      const msg = (err as Error).message.replace(/^safetensors \S+: /, "");
      throw new CheckpointError("bad-header", path, `invalid safetensors header: ${msg}`);
    }
    const inFile = new Map(header.map((h) => [h.name, h]));
    for (const c of f.chunks) {
      const h = inFile.get(c.key);
      if (!h) throw new CheckpointError("bad-header", path, `has no tensor "${c.key}", which ${INDEX_FILE} lists`);
      if (h.dtype !== "f32" || !sameDims(h.shape, c.len)) {
        throw new CheckpointError(
          "bad-header",
          path,
          `tensor "${c.key}" is ${ST_DTYPE[h.dtype]} [${h.shape.join(", ")}]; ${INDEX_FILE} says F32 [${c.len.join(", ")}]`,
        );
      }
      inFile.delete(c.key);
    }
    if (inFile.size) throw new CheckpointError("bad-header", path, `holds tensors ${INDEX_FILE} does not list: ${[...inFile.keys()].slice(0, 3).join(", ")}`);
    const sha = sha256File(path);
    if (sha !== f.sha256) throw new CheckpointError("checksum", path, `sha256 ${sha}; ${INDEX_FILE} records ${f.sha256}`);
  }
  return index;
}

/**
 * A checkpoint loader: how a trainer restores its state. The correct one is below; known-bad ones
 * (harness/training/known-bad/) model a bug each, for the suite's own negative resume cells.
 */
export interface CheckpointLoader {
  name: string;
  /** One line: what it restores (and, for a known-bad one, what it gets wrong). */
  description: string;
  load(backend: Backend, dir: string, index: CheckpointIndex, s: TrainState): void;
}

/**
 * Loads a validated checkpoint into `s` (any layout of the same model): every physical copy of
 * every parameter gets its block of param, exp_avg and exp_avg_sq, and its optimizer step count.
 */
export function loadCheckpoint(backend: Backend, dir: string, index: CheckpointIndex, s: TrainState): void {
  const abs = resolve(dir);
  const dests = new Map<string, CopyState[]>();
  for (const copies of s.ranks) {
    for (const c of copies) (dests.get(c.lp.name) ?? dests.set(c.lp.name, []).get(c.lp.name)!).push(c);
  }
  const copied = new Map<CopyState, number>();
  for (const f of index.files) {
    if (f.chunks.length === 0) continue;
    const path = join(abs, f.file);
    const loaded = backend.loadSafetensors(path, 0);
    try {
      const byKey = new Map(loaded.map((e) => [e.name, e.tensor]));
      for (const chunk of f.chunks) {
        const src = byKey.get(chunk.key)!;
        const block: Block = { globalShape: index.tensors[chunk.name]!.shape, start: chunk.start, len: chunk.len };
        for (const c of dests.get(chunk.name) ?? []) {
          const n = backend.copyBlock(roleTensor(c, chunk.role), c.lp.block, src, block);
          copied.set(c, (copied.get(c) ?? 0) + n);
        }
      }
    } finally {
      for (const e of loaded) backend.free(e.tensor);
    }
  }
  for (const list of dests.values()) {
    for (const c of list) {
      const n = copied.get(c) ?? 0;
      if (n !== c.lp.numel * ROLES.length) {
        throw new Error(`internal: ${c.lp.fqn} [${c.lp.block.start}]+[${c.lp.block.len}] received ${n} of ${c.lp.numel * ROLES.length} elements`);
      }
      c.steps = index.tensors[c.lp.name]!.optimizerStep;
    }
  }
  s.step = index.step;
}

/**
 * Validates, then loads: `s` is changed only when the whole checkpoint is valid (a CheckpointError
 * otherwise, with every tensor of `s` as it was and nothing left allocated).
 */
export function restoreCheckpoint(
  backend: Backend,
  dir: string,
  expect: Expectation,
  s: TrainState,
  loader: CheckpointLoader = correctLoader,
): CheckpointIndex {
  const index = readCheckpoint(backend, dir, expect);
  loader.load(backend, dir, index, s);
  return index;
}

export const correctLoader: CheckpointLoader = {
  name: "correct",
  description: "restores every physical copy's parameter, both moments and its optimizer step count",
  load: loadCheckpoint,
};

/**
 * Goldens (SPEC §11): per matrix, golden/<matrix>.json holds each cell's norms and a hash of its
 * tensors after the clip, under a header naming what produced them.
 *
 *   --golden check    compare every cell that ran with its entry; any drift fails the cell (a check
 *                     named "golden" is added to every cell) and the drifted cells are listed. The
 *                     default wherever golden/<matrix>.json exists for the same backend, CI or not:
 *                     `run` and `npm test -- --matrix` then give the same verdict on a drift.
 *   --golden update   rewrite golden/<matrix>.json atomically from this run (merged into the existing
 *                     entries when the run was partial: --filter, --shard, --subject, --seed).
 *                     Refused (exit 2) when CI=true: goldens change only on a person's request.
 *   --golden off      neither.
 *
 * The folder is ./golden (the working directory's), or $CLIP_PARITY_GOLDEN_DIR.
 *
 * The tensor hash of a cell: the first 16 hex digits of the SHA-256 of one line per local gradient
 * after the clip, in rank order then parameter order, "rank<TAB>index<TAB>fqn<TAB>h\n", where h is the
 * backend's 16-hex content hash (content, dtype and shape) or "-" for an absent gradient. Norms are
 * stored as JSON numbers (exact float64 values of the float32 norms) or "nan" / "inf" / "-inf".
 */
import { accessSync, constants, existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { z } from "zod";
import { InputError } from "../errors.ts";
import { goldenCheck } from "../checks/golden.ts";
import type { BackendKind } from "../backend/backend.ts";
import { jsonNumber } from "../results/json.ts";
import { summarize } from "../results/summary.ts";
import type { CellResult, RunSummary } from "../results/types.ts";
import { writeFileAtomic } from "../util/fs.ts";
import { envValue, isCI } from "../util/env.ts";
import { readJsonFile } from "../util/json-file.ts";

export const GOLDEN_GENERATOR = "SPEC §5 splitmix64";
export const GOLDEN_HASH = "sha256[:16] of 'rank\\tindex\\tfqn\\tbackend.hash(grad)|-' lines after the clip";
export const GOLDEN_MODES = ["check", "update", "off"] as const;
export type GoldenMode = (typeof GOLDEN_MODES)[number];

export function goldenDir(env: NodeJS.ProcessEnv = process.env): string {
  return resolve(envValue("CLIP_PARITY_GOLDEN_DIR", env) ?? "golden");
}

/** A path as a person reads it: relative to the working directory when inside it. */
function shown(path: string): string {
  const r = relative(process.cwd(), path);
  return r && !r.startsWith("..") ? r : path;
}

export function goldenPath(matrix: string, dir = goldenDir()): string {
  if (!/^[A-Za-z0-9._-]+$/.test(matrix)) throw new InputError(`--golden: the matrix name "${matrix}" cannot name a golden file (letters, digits, . _ - only)`);
  return join(dir, `${matrix}.json`);
}

let version: string | undefined;
export function clipParityVersion(): string {
  if (version === undefined) {
    try {
      version = String(JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")).version);
    } catch {
      version = "unknown";
    }
  }
  return version;
}

const normValue = z.union([z.number(), z.enum(["nan", "inf", "-inf"]), z.null()]);

export const goldenEntrySchema = z.strictObject({
  totalNorm: normValue,
  referenceNorm: normValue,
  /** null on the meta backend (no values). */
  hash: z.string().regex(/^[0-9a-f]{16}$/).nullable(),
});

export const goldenHeaderSchema = z.looseObject({
  matrix: z.string(),
  generator: z.string(),
  backend: z.string(),
  platform: z.string(),
  arch: z.string(),
  node: z.string(),
  clipParity: z.string(),
  hash: z.string(),
  cells: z.number().int().nonnegative(),
});

export const goldenFileSchema = z.strictObject({
  header: goldenHeaderSchema,
  cells: z.record(z.string(), goldenEntrySchema),
});

export type GoldenEntry = z.infer<typeof goldenEntrySchema>;
export type GoldenHeader = z.infer<typeof goldenHeaderSchema>;
export type GoldenFile = z.infer<typeof goldenFileSchema>;

export function goldenEntry(r: CellResult, hash: string | null): GoldenEntry {
  return {
    totalNorm: jsonNumber(r.totalNorm) as GoldenEntry["totalNorm"],
    referenceNorm: jsonNumber(r.referenceNorm) as GoldenEntry["referenceNorm"],
    hash,
  };
}

export function goldenHeader(matrix: string, backend: string, cells: number): GoldenHeader {
  return {
    matrix,
    generator: GOLDEN_GENERATOR,
    backend,
    platform: process.platform,
    arch: process.arch,
    node: process.version,
    clipParity: clipParityVersion(),
    hash: GOLDEN_HASH,
    cells,
  };
}

export function readGolden(path: string): GoldenFile {
  return readJsonFile(goldenFileSchema, path, `golden ${shown(path)}`, "a valid golden file");
}

export function writeGolden(path: string, file: GoldenFile): void {
  const cells = Object.fromEntries(Object.keys(file.cells).sort().map((k) => [k, file.cells[k]]));
  writeFileAtomic(path, JSON.stringify({ header: { ...file.header, cells: Object.keys(cells).length }, cells }, null, 2) + "\n");
}

function show(v: unknown): string {
  return v === null ? "none" : String(v);
}

/** What differs between a golden entry and this run's, or null. */
export function entryDrift(golden: GoldenEntry, now: GoldenEntry): string | null {
  const diffs: string[] = [];
  for (const k of ["totalNorm", "referenceNorm"] as const) {
    if (!Object.is(golden[k], now[k])) diffs.push(`${k} ${show(golden[k])} (golden) -> ${show(now[k])} (now)`);
  }
  if (golden.hash !== now.hash) diffs.push(`tensor hash ${show(golden.hash)} (golden) -> ${show(now.hash)} (now)`);
  return diffs.length ? diffs.join("; ") : null;
}

export interface GoldenComparison {
  drifted: { id: string; what: string }[];
  /** Cells that ran but have no golden entry. */
  missing: string[];
  compared: number;
}

export function compareGolden(golden: GoldenFile, entries: ReadonlyMap<string, GoldenEntry>): GoldenComparison {
  const out: GoldenComparison = { drifted: [], missing: [], compared: 0 };
  for (const [id, now] of entries) {
    const g = golden.cells[id];
    if (!g) {
      out.missing.push(id);
      continue;
    }
    out.compared++;
    const what = entryDrift(g, now);
    if (what) out.drifted.push({ id, what });
  }
  return out;
}

export interface GoldenSessionOptions {
  /** The --golden value; undefined = the default (check when the file exists for this backend, CI or not). */
  mode: string | undefined;
  matrix: string;
  backend: BackendKind;
  /** True when the run covers only part of the matrix (filter, shard, subjects, seed). */
  partial: boolean;
  dir?: string;
  env?: NodeJS.ProcessEnv;
  out?: NodeJS.WritableStream;
}

export interface GoldenSession {
  mode: Exclude<GoldenMode, "off">;
  path: string;
  /**
   * check: adds a "golden" check to every result and prints the drifted cells; update: writes the file.
   * Returns the summary (recomputed: drift fails cells) and lines for the reports.
   */
  finish(results: CellResult[]): { summary: RunSummary; notes: string[] };
}

/**
 * Refuses, before any cell runs, a golden path whose folder cannot be written: the nearest existing
 * folder on the way must be a writable folder (a file there would end a whole matrix's run in a crash).
 */
function writableFolderFor(path: string): void {
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    if (existsSync(dir)) {
      if (!statSync(dir).isDirectory()) throw new InputError(`--golden update: ${shown(dir)} is not a folder, so ${shown(path)} cannot be written (CLIP_PARITY_GOLDEN_DIR names the golden folder)`);
      try {
        accessSync(dir, constants.W_OK);
      } catch {
        throw new InputError(`--golden update: the folder ${shown(dir)} is not writable, so ${shown(path)} cannot be written`);
      }
      return;
    }
    if (dirname(dir) === dir) return;
  }
}

/** Validates --golden before anything runs (bad mode, update under CI, check without a file: exit 2). */
export function goldenSession(o: GoldenSessionOptions): GoldenSession | null {
  const env = o.env ?? process.env;
  const out = o.out ?? process.stdout;
  const path = goldenPath(o.matrix, o.dir ?? goldenDir(env));
  const where = shown(path);
  const ci = isCI(env);
  let mode: GoldenMode;
  let golden: GoldenFile | undefined;
  if (o.mode === undefined) {
    if (!existsSync(path)) return null;
    golden = readGolden(path);
    if (golden.header.backend !== o.backend) return null; // a golden of another backend: not checked by default
    mode = "check";
  } else {
    if (!(GOLDEN_MODES as readonly string[]).includes(o.mode)) throw new InputError(`--golden: "${o.mode}" is not one of ${GOLDEN_MODES.join(", ")}`);
    mode = o.mode as GoldenMode;
  }
  if (mode === "off") return null;
  if (mode === "update" && ci) {
    throw new InputError(
      `--golden update is refused when CI=true: goldens change only on a person's request. ` +
        `Run it on a developer machine without CI set, review the diff of ${where} and commit it.`,
    );
  }
  if (mode === "update") writableFolderFor(path);
  if (mode === "check" && !golden) {
    if (!existsSync(path)) throw new InputError(`--golden check: ${where} does not exist; create it with --golden update (not in CI)`);
    golden = readGolden(path);
  }
  const session: GoldenSession = {
    mode,
    path,
    finish(results) {
      const entries = new Map<string, GoldenEntry>();
      // the runner computes each cell's tensor hash (RunCellOptions.hashTensors) while a golden is active
      for (const r of results) entries.set(r.id, goldenEntry(r, r.tensorHash ?? null));
      const notes: string[] = [];
      if (mode === "update") {
        const keep = o.partial && existsSync(path) ? readGolden(path).cells : {};
        const kept = Object.keys(keep).filter((id) => !entries.has(id)).length;
        const cells: Record<string, GoldenEntry> = { ...keep, ...Object.fromEntries(entries) };
        writeGolden(path, { header: goldenHeader(o.matrix, o.backend, Object.keys(cells).length), cells });
        notes.push(`golden: wrote ${entries.size} cells to ${where}${kept ? ` (${kept} kept from before: the run was partial)` : ""}`);
      } else {
        const g = golden!;
        const cmp = compareGolden(g, entries);
        const drift = new Map(cmp.drifted.map((d) => [d.id, d.what]));
        const producer = `${g.header.backend}, ${g.header.platform}/${g.header.arch}, node ${g.header.node}, clip-parity ${g.header.clipParity}`;
        for (const r of results) {
          r.checks.push(goldenCheck(drift.get(r.id) ?? null, Boolean(g.cells[r.id]), where, producer));
        }
        if (g.header.backend !== o.backend) notes.push(`golden: ${where} was produced on backend ${g.header.backend}, this run is on ${o.backend}`);
        if (cmp.drifted.length) {
          notes.push(`golden: ${cmp.drifted.length} of ${cmp.compared} cells drifted from ${where}`);
        } else {
          notes.push(`golden: ${cmp.compared} cells match ${where}`);
        }
        if (cmp.missing.length) notes.push(`golden: ${cmp.missing.length} cells have no entry in ${where} (add them with --golden update)`);
        if (cmp.drifted.length) {
          out.write(`golden drift (${cmp.drifted.length} cells; if intended, rerun with --golden update outside CI and commit ${where}):\n`);
          for (const d of cmp.drifted) out.write(`  DRIFT ${d.id}: ${d.what}\n`);
        }
      }
      for (const n of notes) out.write(`${n}\n`);
      return { summary: summarize(results), notes };
    },
  };
  return session;
}

/**
 * Framework releases as an input (SPEC §11 "Releases are a dimension"): a `torch:` subject pinned to other
 * releases (`torch:deepspeed@deepspeed==0.19.6`, `--with deepspeed==0.19.6`) runs in a Python environment built
 * from the package registry for exactly those pins, cached by them outside the repository and reused.
 *
 * Two kinds, chosen per set of pins:
 * - an *overlay* over the pinned `.venv` when no pin names another torch and the release's requirements admit the
 *   pinned torch: a small venv whose site-packages shadow the pinned ones (a `.pth` line puts `.venv`'s
 *   site-packages after its own), so a DeepSpeed release costs tens of megabytes, not another torch;
 * - its *own* environment otherwise (a pin names another torch, or pip finds the release cannot take the pinned
 *   one): a fresh venv with the pins and what they need, about 5-6 GB.
 *
 * A build runs in `.building-*` beside the cache's environments and is renamed into place only once the pins
 * import, so a half-built environment is never found (a build killed by SIGKILL leaves a `.building-*` folder of a
 * dead pid, removed by the next build). pip runs with --no-cache-dir: the cache holds environments only. After a
 * build, environments not used by this process are evicted least recently used first until the cache fits its
 * cap (CLIP_PARITY_ENV_CACHE_GB, default 40).
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { InputError } from "../../errors.ts";
import { onExitOrSignal } from "../../util/exit.ts";
import { envValue } from "../../util/env.ts";
import { writeFileAtomic } from "../../util/fs.ts";
import { ADAPTER_DIR, torchOptionsFromEnv } from "./options.ts";

/** One `PKG==VER`: the name normalized as PyPI compares names (PEP 503), the version as given. */
export interface Pin {
  name: string;
  version: string;
}

const PIN_RE = /^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc|\.post|\.dev)[0-9]+)*(?:\+[A-Za-z0-9.]+)?)$/;

export const normalizeName = (name: string) => name.toLowerCase().replace(/[-_.]+/g, "-");

/** `PKG==VER` -> a pin; InputError naming `where` and the value otherwise (no ranges: a release is one version). */
export function parsePin(text: string, where: string): Pin {
  const m = PIN_RE.exec(text.trim());
  if (!m) throw new InputError(`${where}: "${text}" is not PKG==VERSION (one released version, e.g. deepspeed==0.19.6; ranges are not releases)`);
  return { name: normalizeName(m[1]!), version: m[2]! };
}

export const formatPin = (p: Pin) => `${p.name}==${p.version}`;

/** Pins sorted by name; InputError when one package is pinned twice. */
export function normalizePins(pins: readonly Pin[], where: string): Pin[] {
  const byName = new Map<string, Pin>();
  for (const p of pins) {
    const seen = byName.get(p.name);
    if (seen && seen.version !== p.version) throw new InputError(`${where}: ${p.name} is pinned twice (${seen.version} and ${p.version})`);
    byName.set(p.name, p);
  }
  return [...byName.values()].sort((a, b) => a.name.localeCompare(b.name));
}

/** A subject spec's releases after `@` (`torch:deepspeed@deepspeed==0.19.6,torch==2.9.1`) and the spec before them. */
export function specPins(spec: string): { head: string; pins: Pin[] } {
  const at = spec.indexOf("@");
  if (at < 0) return { head: spec, pins: [] };
  const where = `subject "${spec}"`;
  return { head: spec.slice(0, at), pins: normalizePins(spec.slice(at + 1).split(",").map((p) => parsePin(p, where)), where) };
}

/**
 * `spec` with `pins` added to its own (the --with flag); a package pinned in both must have one version
 * (InputError otherwise). Specs other than torch: ones are returned as they are.
 */
export function withPins(spec: string, pins: readonly Pin[]): string {
  if (!pins.length || !spec.startsWith("torch:")) return spec;
  const { head, pins: own } = specPins(spec);
  return `${head}@${normalizePins([...own, ...pins], `subject "${spec}" --with`).map(formatPin).join(",")}`;
}

/** The pins of a requirements file (comments and blank lines dropped), as the project pins them. */
export function requirementPins(file: string): Pin[] {
  return readFileSync(file, "utf8")
    .split("\n")
    .map((l) => l.replace(/#.*/, "").trim())
    .filter(Boolean)
    .map((l) => parsePin(l, file));
}

export const PINNED_REQUIREMENTS = join(ADAPTER_DIR, "requirements.txt");
/** Installed without their dependencies (torchtitan's are for training, not for its clip): setup-torch.mjs does the same. */
export const NODEPS_REQUIREMENTS = join(ADAPTER_DIR, "requirements-nodeps.txt");

/**
 * What a framework's release needs installed beside its pins (frameworks.ts `install`): further requirements
 * (`PKG` or `PKG==VER`, resolved together with the pins, so under their torch), and the distributions that go in
 * with --no-deps (a release whose metadata names a package that cannot be installed here, such as torchrec's
 * CUDA-only fbgemm-gpu, whose CPU build a pin names instead). Part of the environment's cache key.
 */
export interface InstallNeeds {
  requires?: readonly string[];
  noDeps?: readonly string[];
}

export interface EnvironmentRecord {
  format: 1;
  pins: string[];
  /** The framework's install needs the environment was built with, when it had any. */
  install?: { requires: string[]; noDeps: string[] };
  kind: "overlay" | "own";
  /** What imports there, by distribution name: torch and each pinned package. */
  versions: Record<string, string>;
  python: string;
  /** The pinned .venv's site-packages an overlay reads after its own. */
  base?: string;
  buildSeconds: number;
  bytes: number;
  builtAt: string;
}

export interface ReleaseEnvironment {
  /** The interpreter to run the adapter with. */
  python: string;
  dir: string;
  record: EnvironmentRecord;
  /** Built by this call (false: found in the cache). */
  built: boolean;
  /**
   * What its processes need besides the interpreter: TORCH_EXTENSIONS_DIR of its own, since an extension a release
   * compiles at run time (DeepSpeed's CPU shm op) is keyed by name alone, and releases taking turns in one folder
   * would rebuild it at every switch.
   */
  env: Record<string, string>;
}

export interface EnvironmentOptions {
  /** The pinned environment's interpreter (.venv), whose torch an overlay reuses. */
  basePython: string;
  cacheDir: string;
  capBytes: number;
  /** Progress lines (stderr by default). */
  log: (line: string) => void;
  /** Shows pip's own output (default: only its errors). */
  verbose: boolean;
  /** What the framework's releases need beside the pins (frameworks.ts `install`; none by default). */
  install?: InstallNeeds;
}

const GiB = 1024 ** 3;

export function defaultEnvironmentOptions(env: NodeJS.ProcessEnv = process.env): EnvironmentOptions {
  const capText = envValue("CLIP_PARITY_ENV_CACHE_GB", env);
  const cap = capText === undefined ? 40 : Number(capText);
  if (!(cap > 0) || !Number.isFinite(cap)) throw new InputError(`CLIP_PARITY_ENV_CACHE_GB: "${capText}" is not a positive number of gigabytes`);
  const xdg = envValue("XDG_CACHE_HOME", env) ?? join(homedir(), ".cache");
  return {
    basePython: torchOptionsFromEnv(env).python,
    cacheDir: envValue("CLIP_PARITY_ENV_CACHE", env) ?? join(xdg, "clip-parity", "envs"),
    capBytes: cap * GiB,
    log: (line) => process.stderr.write(`${line}\n`),
    verbose: false,
  };
}

const RECORD = "clip-parity-env.json";
const USED = ".last-used";
const USERS = ".users";

/** Install needs in a canonical form (names normalized, sorted, duplicates dropped); undefined when there are none. */
export function normalizeInstall(install: InstallNeeds | undefined): EnvironmentRecord["install"] {
  const norm = (xs: readonly string[] | undefined, f: (x: string) => string) => [...new Set((xs ?? []).map(f))].sort();
  const requires = norm(install?.requires, (r) => {
    const [name, version] = r.trim().split("==");
    return version === undefined ? normalizeName(name!) : `${normalizeName(name!)}==${version}`;
  });
  const noDeps = norm(install?.noDeps, normalizeName);
  return requires.length || noDeps.length ? { requires, noDeps } : undefined;
}

/**
 * The cache folder of a set of pins: readable (the pins) and exact (a hash of what decides the build: the pins,
 * the pinned .venv's, and the framework's install needs when it has any).
 */
export function environmentName(pins: readonly Pin[], basePins: readonly Pin[], install?: InstallNeeds): string {
  const needs = normalizeInstall(install);
  const hash = createHash("sha256")
    .update(JSON.stringify({ format: 1, pins: pins.map(formatPin), base: basePins.map(formatPin), ...(needs ? { install: needs } : {}) }))
    .digest("hex")
    .slice(0, 10);
  const label = pins.map((p) => `${p.name}-${p.version}`).join("_").replace(/[^A-Za-z0-9._-]/g, "_").slice(0, 80);
  return `${label}-${hash}`;
}

interface PythonFacts {
  executable: string;
  version: string;
  sitePackages: string;
}

function pythonFacts(python: string): PythonFacts {
  const r = spawnSync(python, ["-c", "import sys, sysconfig, json; print(json.dumps({'executable': sys._base_executable, 'version': '%d.%d' % sys.version_info[:2], 'sitePackages': sysconfig.get_paths()['purelib']}))"], { encoding: "utf8" });
  if (r.status !== 0) throw new InputError(`the pinned PyTorch environment (${python}) does not run: ${(r.stderr || r.error?.message || "").trim().split("\n").pop()}; run \`npm run setup:torch\` first`);
  return JSON.parse(r.stdout.trim().split("\n").pop()!) as PythonFacts;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

function folderBytes(dir: string): number {
  const r = spawnSync("du", ["-sb", dir], { encoding: "utf8" });
  return r.status === 0 ? Number(r.stdout.split(/\s/)[0]) : 0;
}

/** What pip said went wrong, in one line: the package and version it could not get, or its last error. */
export function pipFailure(output: string): { line: string; resolution: boolean } {
  const noMatch = /No matching distribution found for (\S+)/.exec(output);
  if (noMatch) return { line: `no release ${noMatch[1]} on the package registry`, resolution: false };
  if (/Could not find a version that satisfies the requirement (\S+)/.test(output) && /(Network is unreachable|Connection|Temporary failure|Max retries)/i.test(output)) {
    return { line: "the package registry could not be reached", resolution: false };
  }
  const conflict = /(ResolutionImpossible|conflicting dependencies|Cannot install .* because)/i.test(output);
  const because = output.match(/^\s*The conflict is caused by:[\s\S]*?(?=\n\s*\n|$)/m)?.[0]?.replace(/\s+/g, " ").trim();
  if (conflict) return { line: because ?? "the pins' requirements conflict", resolution: true };
  const errors = output.split("\n").filter((l) => /^ERROR:/.test(l.trim()));
  return { line: errors.pop()?.replace(/^ERROR:\s*/, "") ?? output.trim().split("\n").pop() ?? "pip failed", resolution: false };
}

class BuildFailed extends Error {
  constructor(
    message: string,
    readonly resolution: boolean,
  ) {
    super(message);
  }
}

/** The environment for `pins` (empty: the pinned .venv, returned as is): from the cache, or built now. */
export function environmentFor(pins: readonly Pin[], options: Partial<EnvironmentOptions> = {}): ReleaseEnvironment {
  const o = { ...defaultEnvironmentOptions(), ...options };
  const basePins = requirementPins(PINNED_REQUIREMENTS);
  const baseTorch = basePins.find((p) => p.name === "torch")!;
  const wanted = normalizePins(pins, "--with");
  const name = environmentName(wanted, basePins, o.install);
  const dir = join(o.cacheDir, name);
  inUse.add(dir);
  const found = readRecord(dir);
  if (found) {
    touch(dir);
    claim(dir);
    return { python: join(dir, "bin", "python"), dir, record: found, built: false, env: processEnv(dir) };
  }
  mkdirSync(o.cacheDir, { recursive: true });
  removeStaleBuilds(o.cacheDir);
  const base = pythonFacts(o.basePython);
  const torchPin = wanted.find((p) => p.name === "torch");
  const started = performance.now();
  let record: EnvironmentRecord | undefined;
  let overlayFailure: string | undefined;
  if (!torchPin || torchPin.version === baseTorch.version) {
    try {
      record = build(o, dir, wanted, "overlay", base, baseTorch);
    } catch (err) {
      if (!(err instanceof BuildFailed) || !err.resolution) throw asInputError(err, wanted);
      overlayFailure = err.message;
      o.log(`clip-parity: ${wanted.map(formatPin).join(" ")} does not install over torch ${baseTorch.version} (${overlayFailure}): building its own environment`);
    }
  }
  try {
    record ??= build(o, dir, wanted, "own", base, baseTorch);
  } catch (err) {
    throw asInputError(err, wanted);
  }
  o.log(`clip-parity: environment ${name} (${record.kind}, torch ${record.versions.torch}) built in ${((performance.now() - started) / 1000).toFixed(0)} s, ${(record.bytes / 1024 ** 2).toFixed(0)} MB`);
  claim(dir);
  evict(o);
  return { python: join(dir, "bin", "python"), dir, record, built: true, env: processEnv(dir) };
}

const processEnv = (dir: string) => ({ TORCH_EXTENSIONS_DIR: join(dir, "torch-extensions") });

function asInputError(err: unknown, pins: readonly Pin[]): Error {
  if (err instanceof BuildFailed) return new InputError(`--with ${pins.map(formatPin).join(" --with ")}: ${err.message}`);
  return err as Error;
}

/** Environments this process has used: never evicted under it. */
const inUse = new Set<string>();

function readRecord(dir: string): EnvironmentRecord | undefined {
  try {
    const r = JSON.parse(readFileSync(join(dir, RECORD), "utf8")) as EnvironmentRecord;
    return r.format === 1 && existsSync(join(dir, "bin", "python")) ? r : undefined;
  } catch {
    return undefined;
  }
}

function touch(dir: string): void {
  const now = new Date();
  try {
    utimesSync(join(dir, USED), now, now);
  } catch {
    writeFileSync(join(dir, USED), "");
  }
}

/**
 * Marks `dir` as used by this process (a file named by its pid under .users/, removed at exit): another process's
 * eviction skips an environment any live process has claimed.
 */
function claim(dir: string): void {
  const users = join(dir, USERS);
  mkdirSync(users, { recursive: true });
  const mine = join(users, String(process.pid));
  writeFileSync(mine, "");
  claims.add(mine);
  onExitOrSignal(releaseClaims);
}

/**
 * Gives up this process's claim on an environment it is done with (a history or bisect run walks through many
 * releases; holding every one until exit kept the cache from ever shrinking during the run).
 */
export function releaseEnvironment(dir: string): void {
  inUse.delete(dir);
  const mine = join(dir, USERS, String(process.pid));
  rmSync(mine, { force: true });
  claims.delete(mine);
}

/** This process's claim files and unfinished builds, removed by one exit hook (not one per environment). */
const claims = new Set<string>();
function releaseClaims(): void {
  for (const path of claims) rmSync(path, { recursive: true, force: true });
  claims.clear();
}

function claimedByOthers(dir: string): boolean {
  try {
    return readdirSync(join(dir, USERS)).some((f) => Number(f) !== process.pid && pidAlive(Number(f)));
  } catch {
    return false;
  }
}

function removeStaleBuilds(cacheDir: string): void {
  for (const entry of readdirSync(cacheDir)) {
    const m = /^\.building-(\d+)-/.exec(entry);
    if (m && !pidAlive(Number(m[1]))) rmSync(join(cacheDir, entry), { recursive: true, force: true });
  }
}

function pip(o: EnvironmentOptions, python: string, args: string[], what: string): void {
  o.log(`clip-parity:   ${what}: pip install ${args.join(" ")}`);
  const r = spawnSync(python, ["-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--no-input", ...(o.verbose ? [] : ["--progress-bar", "off"]), ...args], {
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
    env: { ...process.env, PIP_NO_INPUT: "1", PYTHONWARNINGS: "ignore" },
  });
  const out = `${r.stdout ?? ""}\n${r.stderr ?? ""}`;
  if (o.verbose) o.log(out.trimEnd());
  if (r.error) throw new BuildFailed(`pip could not be run: ${r.error.message}`, false);
  if (r.status !== 0) {
    const f = pipFailure(out);
    throw new BuildFailed(f.line, f.resolution);
  }
}

/** Builds into a `.building-*` folder and renames it to `dir` once its pins import; throws BuildFailed. */
function build(o: EnvironmentOptions, dir: string, pins: readonly Pin[], kind: EnvironmentRecord["kind"], base: PythonFacts, baseTorch: Pin): EnvironmentRecord {
  const started = performance.now();
  const tmp = join(o.cacheDir, `.building-${process.pid}-${kind}-${dir.split("/").pop()}`);
  const cleanup = () => {
    rmSync(tmp, { recursive: true, force: true });
    claims.delete(tmp);
  };
  cleanup();
  claims.add(tmp); // removed by the exit hook if the process ends mid-build
  onExitOrSignal(releaseClaims);
  o.log(`clip-parity: building the environment for ${pins.map(formatPin).join(" ")} (${kind === "overlay" ? `over the pinned torch ${baseTorch.version}` : "its own torch"}) in ${o.cacheDir}`);
  try {
    const venv = spawnSync(base.executable, ["-m", "venv", tmp], { encoding: "utf8" });
    if (venv.status !== 0) throw new BuildFailed(`python -m venv failed: ${(venv.stderr || "").trim().split("\n").pop()}`, false);
    const py = join(tmp, "bin", "python");
    const needs = normalizeInstall(o.install);
    const nodeps = new Set([...requirementPins(NODEPS_REQUIREMENTS).map((p) => p.name), ...(needs?.noDeps ?? [])]);
    const reqName = (r: string) => r.split("==")[0]!;
    // the framework's further requirements go in with the pins (one resolution, under the pins' torch)
    const withDeps = [...pins.filter((p) => !nodeps.has(p.name)).map(formatPin), ...(needs?.requires ?? []).filter((r) => !nodeps.has(reqName(r)))];
    const without = [...pins.filter((p) => nodeps.has(p.name)).map(formatPin), ...(needs?.requires ?? []).filter((r) => nodeps.has(reqName(r)))];
    if (kind === "overlay") {
      const site = pythonFacts(py).sitePackages;
      // after the overlay's own site-packages: what the overlay installs shadows the pinned release
      writeFileSync(join(site, "zz-clip-parity-base.pth"), `${base.sitePackages}\n`);
      const constraints = join(tmp, "constraints.txt");
      writeFileSync(constraints, `torch==${baseTorch.version}\n`);
      if (withDeps.length) pip(o, py, ["-c", constraints, ...withDeps], "the pins over the pinned torch");
    } else {
      // numpy: the adapter reads and writes its shards through it
      const extra = pins.some((p) => p.name === "numpy") || needs?.requires.some((r) => reqName(r) === "numpy") ? [] : ["numpy"];
      pip(o, py, [...withDeps, ...extra], "the pins and what they need");
    }
    if (without.length) pip(o, py, ["--no-deps", ...without], "the pins installed without their dependencies");
    const versions = installedVersions(py, pins);
    for (const p of pins) {
      if (versions[p.name] !== p.version) throw new BuildFailed(`${p.name} ${versions[p.name] ?? "is not importable"} in the built environment, ${p.version} was pinned`, false);
    }
    const record: EnvironmentRecord = {
      format: 1,
      pins: pins.map(formatPin),
      ...(needs ? { install: needs } : {}),
      kind,
      versions,
      python: base.version,
      ...(kind === "overlay" ? { base: base.sitePackages } : {}),
      buildSeconds: (performance.now() - started) / 1000,
      bytes: folderBytes(tmp),
      builtAt: new Date().toISOString(),
    };
    writeFileAtomic(join(tmp, RECORD), JSON.stringify(record, null, 2) + "\n");
    writeFileSync(join(tmp, USED), "");
    try {
      renameSync(tmp, dir);
      claims.delete(tmp);
    } catch (err) {
      // another process built the same pins meanwhile: use theirs
      if (!readRecord(dir)) throw err;
      cleanup();
      return readRecord(dir)!;
    }
    return record;
  } catch (err) {
    cleanup();
    throw err;
  }
}

/** Distribution versions as the environment's interpreter sees them: torch and each pin. */
function installedVersions(python: string, pins: readonly Pin[]): Record<string, string> {
  const names = ["torch", ...pins.map((p) => p.name)];
  const r = spawnSync(
    python,
    ["-c", "import json, sys, importlib.metadata as md\nout = {}\nfor n in sys.argv[1:]:\n    try: out[n] = md.version(n)\n    except md.PackageNotFoundError: pass\nprint(json.dumps(out))", ...names],
    { encoding: "utf8" },
  );
  if (r.status !== 0) throw new BuildFailed(`the built environment's Python does not run: ${(r.stderr || "").trim().split("\n").pop()}`, false);
  const raw = JSON.parse(r.stdout.trim().split("\n").pop()!) as Record<string, string>;
  return Object.fromEntries(Object.entries(raw).map(([n, v]) => [normalizeName(n), v.split("+")[0]!]));
}

/** The cache's environments, least recently used first. */
export function cachedEnvironments(cacheDir: string): { dir: string; record: EnvironmentRecord; lastUsed: number }[] {
  if (!existsSync(cacheDir)) return [];
  return readdirSync(cacheDir)
    .filter((e) => !e.startsWith("."))
    .map((e) => join(cacheDir, e))
    .flatMap((dir) => {
      const record = readRecord(dir);
      if (!record) return [];
      let lastUsed = 0;
      try {
        lastUsed = statSync(join(dir, USED)).mtimeMs;
      } catch {
        // never used since its build
      }
      return [{ dir, record, lastUsed }];
    })
    .sort((a, b) => a.lastUsed - b.lastUsed);
}

/** Removes least recently used environments (never one this process or another live one uses) until the cache fits its cap. */
export function evict(o: Pick<EnvironmentOptions, "cacheDir" | "capBytes" | "log">): string[] {
  const envs = cachedEnvironments(o.cacheDir);
  let total = envs.reduce((s, e) => s + e.record.bytes, 0);
  const removed: string[] = [];
  for (const e of envs) {
    if (total <= o.capBytes) break;
    if (inUse.has(e.dir) || claimedByOthers(e.dir)) continue;
    rmSync(e.dir, { recursive: true, force: true });
    total -= e.record.bytes;
    removed.push(e.dir);
    o.log(`clip-parity: evicted ${e.dir} (${(e.record.bytes / GiB).toFixed(1)} GB; the cache holds at most ${(o.capBytes / GiB).toFixed(0)} GB)`);
  }
  return removed;
}

/** The released versions of a package on the registry, oldest first (pip index versions). */
export function registryVersions(pkg: string, python = defaultEnvironmentOptions().basePython): string[] {
  const r = spawnSync(python, ["-m", "pip", "index", "versions", "--disable-pip-version-check", pkg], { encoding: "utf8", env: { ...process.env, PYTHONWARNINGS: "ignore" } });
  const m = /Available versions: (.*)/.exec(r.stdout ?? "");
  if (r.status !== 0 || !m) {
    throw new InputError(`${pkg}: no releases found on the package registry (${pipFailure(`${r.stdout}\n${r.stderr}`).line})`);
  }
  return m[1]!
    .split(",")
    .map((v) => v.trim())
    .filter((v) => /^[0-9]+(\.[0-9]+)*$/.test(v))
    .sort(compareVersions);
}

/** Release order of two plain versions (digits and dots; a missing part counts as 0). */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d) return Math.sign(d);
  }
  return 0;
}

/**
 * `torch:<module>:<function>` subjects: a real Python clipping function (torch.nn.utils.clip_grad_norm_,
 * torchtitan's, a user's own) run by the PyTorch adapter (adapters/torch/adapter.py) under torchrun, one
 * process per rank, with the cell's gradients as DTensors on the cell's meshes.
 *
 * The harness keeps one adapter session alive per world size (launching torchrun costs seconds: torch's
 * import alone takes most of them) and sends it one cell at a time through files in a session directory:
 * per rank, the gradients (safetensors, written by the native store) and a job JSON (the rank's physical
 * copies: fqn, canonical name, mesh, axes, placements, block, global shape, dtype, has-grad); the adapter
 * answers per rank with the clipped gradients (safetensors, loaded back into the cell's tensors so that
 * parity.tensors and the scaling checks judge them), the returned norm or the exception, the collectives it
 * issued and its scratch memory. A timeout (a hang), a crash or an adapter error fails the cell with the
 * adapter's last lines of output, ends the session, and the run goes on with a fresh one.
 *
 * Environment: CLIP_PARITY_TORCH_PYTHON (default .venv/bin/python, made by `npm run setup:torch`),
 * CLIP_PARITY_TORCH_TIMEOUT_S (per cell, default 180), CLIP_PARITY_TORCH_START_TIMEOUT_S (torchrun start,
 * default 300), CLIP_PARITY_TORCH_TOLERANCE (exact|fp32|bf16: the class claimed for every cell; default fp32
 * for float32 gradients, bf16 for bfloat16/float16 ones, since torch reduces in the gradients' dtype),
 * CLIP_PARITY_TORCH_FOREACH (true|false: passed as `foreach` when the target takes it; default: not passed),
 * CLIP_PARITY_TORCH_DEVICE=cpu (gloo even when there is a GPU per rank), CLIP_PARITY_TORCH_VERBOSE=1 (print
 * the session directory: the adapter's log, every job's files), CLIP_PARITY_TORCH_KEEP=1 (keep them).
 */
import { execa } from "execa";
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { InputError } from "../errors.ts";
import type { CommRecord, CollectiveKind } from "../world/world.ts";
import type { ExternalCell, ExternalRun, ParamView, Subject, Tensor, ToleranceClass } from "./api.ts";

export const PROJECT_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const ADAPTER = join(PROJECT_ROOT, "adapters", "torch", "adapter.py");
export const SETUP_HINT = "run `npm run setup:torch` (installs torch from PyPI into .venv/, about 3 GB, 2-3 minutes)";

const SPEC = /^torch:([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$/;

/** `torch:<module>:<function>` -> its parts; InputError on anything else. */
export function parseTorchSpec(spec: string): { module: string; fn: string; target: string } {
  const m = SPEC.exec(spec);
  if (!m) {
    throw new InputError(
      `subject "${spec}": a PyTorch subject is torch:<module>:<function>, e.g. torch:torch.nn.utils:clip_grad_norm_ ` +
        "or torch:torchtitan.distributed.utils:clip_grad_norm_ (module: a dotted Python module path; function: a name in it)",
    );
  }
  return { module: m[1]!, fn: m[2]!, target: `${m[1]}:${m[2]}` };
}

/** The interpreter that has torch: CLIP_PARITY_TORCH_PYTHON, else the project's .venv. */
export function torchPython(): string {
  return process.env.CLIP_PARITY_TORCH_PYTHON ?? join(PROJECT_ROOT, ".venv", "bin", "python");
}

export interface TorchInfo {
  python: string;
  torch: string;
  gloo: boolean;
  cuda: boolean;
  gpus: number;
}

const PROBE = `
import json, sys, importlib
out = {}
try:
    import torch, torch.distributed as dist
    import torch.distributed.tensor.debug
except Exception as e:
    print(json.dumps({"stage": "torch", "error": f"{type(e).__name__}: {e}"})); sys.exit(0)
out = {"torch": torch.__version__, "gloo": dist.is_gloo_available(), "cuda": torch.cuda.is_available(), "gpus": torch.cuda.device_count()}
if len(sys.argv) > 2:
    try:
        obj = importlib.import_module(sys.argv[1])
        for part in sys.argv[2].split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError("it is not callable")
    except Exception as e:
        out.update({"stage": "target", "error": f"{type(e).__name__}: {e}"})
print(json.dumps(out))
`;

const probes = new Map<string, TorchInfo>();

/** Python finds a user's target module from the working directory first (like a module-path subject). */
function pythonPath(): string {
  return [process.cwd(), process.env.PYTHONPATH].filter(Boolean).join(":");
}

/** Whether torch (and the target, when given) imports; InputError saying how to fix it when not. */
export function probeTorch(target?: { module: string; fn: string }, what = "the PyTorch adapter"): TorchInfo {
  const python = torchPython();
  const key = `${python}|${target?.module ?? ""}|${target?.fn ?? ""}`;
  const hit = probes.get(key);
  if (hit) return hit;
  if (!existsSync(python)) {
    throw new InputError(`${what} needs PyTorch, which is not installed for clip-parity (no ${python}): ${SETUP_HINT}, or set CLIP_PARITY_TORCH_PYTHON to a Python that has torch`);
  }
  const r = spawnSync(python, ["-c", PROBE, ...(target ? [target.module, target.fn] : [])], {
    encoding: "utf8",
    timeout: 120_000,
    env: { ...process.env, PYTHONPATH: pythonPath(), PYTHONDONTWRITEBYTECODE: "1" },
  });
  const last = (r.stdout ?? "").trim().split("\n").pop() ?? "";
  let info: (TorchInfo & { stage?: string; error?: string }) | undefined;
  try {
    info = { python, ...JSON.parse(last) };
  } catch {
    throw new InputError(`${what}: ${python} could not be run (${r.error?.message ?? (r.stderr ?? "").trim().split("\n").slice(-3).join(" | ")}): ${SETUP_HINT}`);
  }
  if (info!.stage === "torch") throw new InputError(`${what}: torch does not import in ${python} (${info!.error}): ${SETUP_HINT}`);
  if (info!.stage === "target") {
    const titan = target!.module.startsWith("torchtitan") ? " (torchtitan: `npm run setup:torch -- --torchtitan`)" : "";
    throw new InputError(`${what}: ${target!.module}.${target!.fn} cannot be imported with torch ${info!.torch}: ${info!.error}${titan}`);
  }
  probes.set(key, info!);
  return info!;
}

// ---- sessions: one torchrun per world size, reused across cells -----------------------------------------

/** Per cell: the clip itself takes about a second; a hang is what this catches. */
const DEFAULT_TIMEOUT_S = 180;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function envSeconds(name: string, fallback: number): number {
  const v = process.env[name];
  if (v === undefined || v === "") return fallback;
  const n = Number(v);
  if (!(n > 0)) throw new InputError(`${name}: "${v}" is not a positive number of seconds`);
  return n;
}

function writeJsonAtomic(path: string, value: unknown): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(value));
  renameSync(tmp, path);
}

/** The last `n` lines of the session's output (torchrun and every rank, interleaved). */
function tailOf(path: string, n = 25): string {
  try {
    const size = statSync(path).size;
    const fd = openSync(path, "r");
    const len = Math.min(size, 64 * 1024);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    closeSync(fd);
    const lines = buf.toString("utf8").split("\n").filter((l) => l.trim() && !/^W\d{4} .*(OMP_NUM_THREADS|\*{5})/.test(l));
    if (!lines.length) return "(none: the log holds only warnings)";
    // torchrun's own summary fills the last lines after a crash: put the cause (an abort's `what():`, an
    // exception) first when it scrolled out.
    const last = lines.slice(-n);
    const causes = [...new Set(lines.filter((l) => /terminate called|what\(\)|Segmentation fault|^\w*(Error|Exception): /.test(l.trim())))]
      .filter((l) => !last.includes(l) && !/ChildFailedError/.test(l))
      .slice(0, 6);
    return [...causes, ...(causes.length ? ["..."] : []), ...last].join("\n");
  } catch {
    return "(no output)";
  }
}

/** What one rank's adapter wrote for one cell. */
interface RankResult {
  rank: number;
  norm: number | string | null;
  normDtype?: string;
  error: { type: string; message: string; traceback: string[] } | null;
  adapterError?: boolean;
  comm?: { calls: number; bytes: number; byKind: Record<string, { calls: number; bytes: number }>; byGroup: Record<string, { calls: number; bytes: number }> };
  memory?: { scratchPeakBytes: number; leakedBytes: number; method: string };
  gradsMissing?: string[];
  timings?: Record<string, number>;
}

export class TorchSession {
  readonly dir: string;
  readonly log: string;
  private proc: { readonly pid?: number } | null = null;
  private exit: { code: number | null; signal: string | null } | null = null;
  private next = 0;
  readonly startedAt = performance.now();
  info: { torch: string; backend: string; device: string } | null = null;

  private constructor(
    readonly world: number,
    readonly python: string,
  ) {
    const base = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();
    this.dir = mkdtempSync(join(base, "clip-parity-torch-"));
    this.log = join(this.dir, "adapter.log");
  }

  static async start(world: number, python: string): Promise<TorchSession> {
    const s = new TorchSession(world, python);
    const fd = openSync(s.log, "a");
    const env: Record<string, string> = {
      OMP_NUM_THREADS: process.env.OMP_NUM_THREADS ?? "1",
      PYTHONUNBUFFERED: "1",
      PYTHONWARNINGS: "ignore",
      PYTHONDONTWRITEBYTECODE: "1", // no __pycache__ in adapters/ or in the user's tree
      PYTHONPATH: pythonPath(),
      // A rank stuck in a collective gives up a little after the harness has ended the session.
      CLIP_PARITY_TORCH_PG_TIMEOUT_S: String(envSeconds("CLIP_PARITY_TORCH_TIMEOUT_S", DEFAULT_TIMEOUT_S) + 60),
    };
    const proc = execa(
      python,
      ["-m", "torch.distributed.run", "--standalone", `--nproc-per-node=${world}`, ADAPTER, "serve", s.dir],
      // A raw file descriptor (execa passes it to the child as is; its types only list stream values): no
      // pipe through this process, so an open session never keeps the harness alive.
      { stdin: "ignore", stdout: fd as unknown as "inherit", stderr: fd as unknown as "inherit", detached: true, reject: false, cleanup: false, env, cwd: PROJECT_ROOT },
    );
    closeSync(fd); // the child has its own copy
    s.proc = proc;
    proc.unref(); // a session left open must not keep the harness alive; the exit hook kills it
    live.add(s);
    void proc.then((r) => {
      s.exit = { code: r.exitCode ?? null, signal: r.signal ?? null };
    });
    if (process.env.CLIP_PARITY_TORCH_VERBOSE) process.stderr.write(`clip-parity: torch adapter (${world} ranks) logs to ${s.log}\n`);
    const deadline = performance.now() + envSeconds("CLIP_PARITY_TORCH_START_TIMEOUT_S", 300) * 1000;
    const ready = Array.from({ length: world }, (_, r) => join(s.dir, `ready-${r}.json`));
    const missing = await s.waitFor(ready, deadline);
    if (missing.length) {
      const why = s.exit ? `torchrun exited (${s.describeExit()})` : `ranks ${missing.join(",")} were not ready after ${((performance.now() - s.startedAt) / 1000).toFixed(0)} s`;
      const tail = tailOf(s.log);
      s.kill();
      throw new AdapterStartError(`the PyTorch adapter did not start: ${why}\n${tail}`);
    }
    s.info = JSON.parse(readFileSync(ready[0]!, "utf8"));
    return s;
  }

  get alive(): boolean {
    return this.proc !== null && this.exit === null;
  }

  describeExit(): string {
    if (!this.exit) return "running";
    return this.exit.signal ? `signal ${this.exit.signal}` : `exit code ${this.exit.code}`;
  }

  tail(n = 25): string {
    return tailOf(this.log, n);
  }

  /** Waits until every path exists, the process exits or the deadline passes; returns the indices missing. */
  private async waitFor(paths: string[], deadline: number): Promise<number[]> {
    let delay = 2;
    for (;;) {
      const missing = paths.flatMap((p, i) => (existsSync(p) ? [] : [i]));
      if (!missing.length || this.exit || performance.now() > deadline) return missing;
      await sleep(delay);
      delay = Math.min(delay * 1.5, 25);
    }
  }

  /** One cell: writes every rank's job, waits for every rank's result. */
  async runJob(
    jobs: (dir: string, rank: number) => Record<string, unknown>,
    timeoutMs: number,
  ): Promise<{ dir: string; results: (RankResult | undefined)[]; failure: string | null }> {
    const dir = join(this.dir, `job-${this.next++}`);
    mkdirSync(dir, { recursive: true });
    for (let r = 0; r < this.world; r++) writeJsonAtomic(join(dir, `job-${r}.json`), jobs(dir, r));
    const paths = Array.from({ length: this.world }, (_, r) => join(dir, `result-${r}.json`));
    const started = performance.now();
    const missing = await this.waitFor(paths, started + timeoutMs);
    const results = paths.map((p) => (existsSync(p) ? (JSON.parse(readFileSync(p, "utf8")) as RankResult) : undefined));
    let failure: string | null = null;
    if (missing.length) {
      const ranks = missing.join(",");
      failure = this.exit
        ? `the PyTorch adapter crashed (${this.describeExit()}) before rank(s) ${ranks} finished the cell`
        : `the PyTorch adapter did not finish within ${(timeoutMs / 1000).toFixed(0)} s: rank(s) ${ranks} never returned ` +
          "(a hang: a rank waits in a collective that the others never issued)";
      failure += `; its last output:\n${this.tail()}`;
      this.kill();
    }
    return { dir, results, failure };
  }

  /** Asks the adapter to quit and waits a little; kills it otherwise. */
  async close(): Promise<void> {
    if (this.alive) {
      const dir = join(this.dir, `job-${this.next++}`);
      mkdirSync(dir, { recursive: true });
      for (let r = 0; r < this.world; r++) writeJsonAtomic(join(dir, `job-${r}.json`), { quit: true });
      const deadline = performance.now() + 10_000;
      while (this.alive && performance.now() < deadline) await sleep(20);
    }
    this.kill();
  }

  /**
   * Ends torchrun (its process group) and every rank: torchrun starts each rank in a session of its own, so
   * the ranks are killed by the pids they wrote when ready (a rank that never got that far, or one whose
   * torchrun died first, notices that its parent or the session directory is gone, and exits). Then
   * removes the session directory.
   */
  kill(): void {
    live.delete(this);
    if (current === this) current = null;
    const pids: number[] = [];
    for (let r = 0; r < this.world; r++) {
      try {
        pids.push(JSON.parse(readFileSync(join(this.dir, `ready-${r}.json`), "utf8")).pid);
      } catch {
        // not ready yet
      }
    }
    const pid = this.proc?.pid;
    const signal = (target: number) => {
      try {
        process.kill(target, "SIGKILL");
      } catch {
        // already gone
      }
    };
    // Only while torchrun lives: its ranks are then its children, so their pids cannot have been reused.
    if (pid !== undefined && this.exit === null) {
      for (const p of pids) if (Number.isInteger(p) && p > 1) signal(p);
      signal(-pid);
    }
    if (!process.env.CLIP_PARITY_TORCH_KEEP) rmSync(this.dir, { recursive: true, force: true });
  }
}

export class AdapterStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AdapterStartError";
  }
}

const live = new Set<TorchSession>();
let current: TorchSession | null = null;
let exitHook = false;

function killAll(): void {
  for (const s of [...live]) s.kill();
}

function installExitHook(): void {
  if (exitHook) return;
  exitHook = true;
  process.on("exit", killAll);
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    const handler = () => {
      killAll();
      process.off(sig, handler);
      process.kill(process.pid, sig);
    };
    process.on(sig, handler);
  }
}

/** The session for `world` ranks: the current one when it fits, else a fresh one (the old one ends). */
async function sessionFor(world: number, python: string): Promise<TorchSession> {
  if (current && current.alive && current.world === world && current.python === python) return current;
  if (current) await current.close();
  installExitHook();
  current = await TorchSession.start(world, python);
  return current;
}

/** Ends every adapter session (tests call it in afterAll; the CLI relies on the exit hook). */
export async function closeTorchSessions(): Promise<void> {
  const all = [...live];
  await Promise.all(all.map((s) => s.close()));
  current = null;
}

// ---- the subject ------------------------------------------------------------------------------------------

const KINDS: readonly CollectiveKind[] = ["all_reduce", "all_gather", "broadcast", "barrier"];

function commRecord(r: RankResult | undefined): CommRecord {
  const k = () => ({ calls: 0, bytes: 0 });
  const rec: CommRecord = { calls: 0, bytes: 0, byKind: { all_reduce: k(), all_gather: k(), broadcast: k(), barrier: k() }, byGroup: {} };
  if (!r?.comm) return rec;
  rec.calls = r.comm.calls;
  rec.bytes = r.comm.bytes;
  for (const kind of KINDS) if (r.comm.byKind[kind]) rec.byKind[kind] = { ...r.comm.byKind[kind]! };
  rec.byGroup = { ...r.comm.byGroup };
  return rec;
}

function parseNorm(v: number | string | null): number | undefined {
  if (v === null) return undefined;
  if (typeof v === "number") return v;
  return v === "NaN" ? NaN : v === "Infinity" ? Infinity : v === "-Infinity" ? -Infinity : Number(v);
}

/** The class a torch subject claims for a cell: torch reduces in the gradients' dtype. */
export function torchTolerance(dtype: string): ToleranceClass {
  const forced = process.env.CLIP_PARITY_TORCH_TOLERANCE;
  if (forced) {
    if (forced !== "exact" && forced !== "fp32" && forced !== "bf16") throw new InputError(`CLIP_PARITY_TORCH_TOLERANCE: "${forced}" is not exact, fp32 or bf16`);
    return forced;
  }
  return dtype === "f32" ? "fp32" : "bf16";
}

/** " (at clip_grad.py:72 _get_total_norm < _dispatch.py:323 ...)": the innermost frames, short. */
function whereRaised(traceback: string[]): string {
  const frames = traceback
    .map((l) => /File "([^"]+)", line (\d+), in (\S+)/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => `${m[1]!.split("/").pop()}:${m[2]} ${m[3]}`);
  return frames.length ? ` (at ${frames.slice(-3).reverse().join(" < ")})` : "";
}

const isTimeout = (msg: string) => /timed? ?out|timeout/i.test(msg);

function jobFor(view: ParamView): Record<string, unknown> {
  return {
    fqn: view.fqn,
    name: view.name,
    canonical: view.canonical,
    tieGroup: view.tieGroup,
    mesh: view.mesh,
    meshAxes: view.meshAxes,
    placements: view.placements,
    globalShape: view.globalShape,
    block: view.block,
    hasGrad: view.grad !== null,
  };
}

async function runExternal(target: string, x: ExternalCell): Promise<ExternalRun> {
  const { world, backend } = x;
  const fail = (message: string, liveness: string | null): ExternalRun => ({
    ranks: Array.from({ length: world }, (_, rank) => ({ rank, error: new Error(message) })),
    liveness,
    comm: Array.from({ length: world }, () => commRecord(undefined)),
  });
  if (backend.isMeta) return fail("the meta backend holds no gradient values: torch subjects run on the cpu backend", null);
  const timeoutMs = x.timeoutMs ?? envSeconds("CLIP_PARITY_TORCH_TIMEOUT_S", DEFAULT_TIMEOUT_S) * 1000;
  const foreachEnv = process.env.CLIP_PARITY_TORCH_FOREACH;
  const foreach = foreachEnv === undefined || foreachEnv === "" ? null : foreachEnv === "true";

  let session: TorchSession;
  try {
    session = await sessionFor(world, torchPython());
  } catch (err) {
    if (err instanceof AdapterStartError) return fail(err.message, err.message);
    throw err;
  }
  const cellInfo = { ...x.cell, world, layout: x.layout };
  const epEnabled = x.params.some((ps) => ps.some((p) => p.mesh === "sparse"));
  const { dir, results, failure } = await session.runJob((jobDir, rank) => {
    const entries = x.params[rank]!.filter((p) => p.grad !== null).map((p) => ({ name: p.fqn, tensor: p.grad as Tensor }));
    const grads = join(jobDir, `in-${rank}.safetensors`);
    backend.saveSafetensors(grads, entries, { rank: String(rank), cell: JSON.stringify(cellInfo) });
    return {
      target,
      rank,
      world,
      layout: x.layout,
      dtype: x.cell.dtype,
      maxNorm: x.maxNorm,
      normType: x.normType === Infinity ? "inf" : x.normType,
      errorIfNonfinite: x.errorIfNonfinite,
      foreach,
      epEnabled,
      grads,
      out: join(jobDir, `out-${rank}.safetensors`),
      result: join(jobDir, `result-${rank}.json`),
      params: x.params[rank]!.map(jobFor),
    };
  }, timeoutMs);

  const ranks: ExternalRun["ranks"] = [];
  const memory: NonNullable<ExternalRun["memory"]> = [];
  let liveness = failure;
  for (let rank = 0; rank < world; rank++) {
    const r = results[rank];
    memory.push({ scratchPeakBytes: r?.memory?.scratchPeakBytes ?? 0, leakedBytes: r?.memory?.leakedBytes ?? 0 });
    if (!r) {
      ranks.push({ rank, error: new Error(failure ?? "no result") });
      continue;
    }
    if (r.error) {
      const msg = `${r.error.type}: ${r.error.message}${whereRaised(r.error.traceback)}`;
      if (r.adapterError) liveness ??= `rank ${rank}: the PyTorch adapter failed: ${msg}\n${session.tail(12)}`;
      else if (isTimeout(r.error.message)) liveness ??= `rank ${rank} timed out in a collective (a hang): ${msg}`;
      ranks.push({ rank, error: new Error(msg) });
    } else {
      ranks.push({ rank, value: parseNorm(r.norm) });
    }
    // The clipped gradients go back into the cell's tensors, whatever the norm was.
    const out = join(dir, `out-${rank}.safetensors`);
    if (!existsSync(out)) continue;
    try {
      const byFqn = new Map(x.params[rank]!.map((p) => [p.fqn, p]));
      const ops = backend.opsFor(rank);
      for (const { name, tensor } of backend.loadSafetensors(out, rank)) {
        try {
          const view = byFqn.get(name);
          if (!view?.grad) throw new Error(`the adapter returned a gradient for ${name}, which has none here`);
          if (tensor.dtype !== view.grad.dtype || tensor.numel !== view.grad.numel) {
            throw new Error(`${name}: the adapter returned ${tensor.dtype} [${tensor.shape.join(", ")}], expected ${view.grad.dtype} [${view.grad.shape.join(", ")}]`);
          }
          ops.copy_(view.grad, tensor);
        } finally {
          backend.free(tensor);
        }
      }
    } catch (err) {
      liveness ??= `rank ${rank}: the clipped gradients could not be read back: ${(err as Error).message}`;
    }
  }
  if (!process.env.CLIP_PARITY_TORCH_KEEP) rmSync(dir, { recursive: true, force: true });
  return { ranks, liveness, comm: results.map(commRecord), memory, tolerance: torchTolerance(x.cell.dtype) };
}

/** The subject for `torch:<module>:<function>`; InputError (exit 2) when torch or the target is missing. */
export function loadTorchSubject(spec: string): Subject {
  const { module, fn, target } = parseTorchSpec(spec);
  const info = probeTorch({ module, fn }, `subject "${spec}"`);
  return {
    name: spec,
    description: `${module}.${fn} from PyTorch ${info.torch}, run by adapters/torch under torchrun (one process per rank)`,
    tolerance: "fp32",
    async clip() {
      throw new Error(`${spec} runs in Python through the PyTorch adapter (Subject.external); it has no in-process clip`);
    },
    external: (cell) => runExternal(target, cell),
  };
}

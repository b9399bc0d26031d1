/**
 * The lifetime of torchrun sessions (the protocol they speak: protocol.ts). Launching torchrun costs 10 to
 * 50 s on two cores, mostly the import of torch on every rank, so one session serves one cell after another
 * and a new one starts only when the world size, the interpreter or the isolation key changes, after a hang
 * or after a crash. Every session is killed by pid: on replacement, on a timeout, at exit and on
 * SIGINT/SIGTERM; none outlives the harness.
 */
import { onExitOrSignal } from "../../util/exit.ts";
import { execa } from "execa";
import { chmodSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readSync, rmSync, statSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeFileAtomic } from "../../util/fs.ts";
import { ADAPTER, ADAPTER_DIR, PROJECT_ROOT, type TorchOptions } from "./options.ts";
import { checkJob, PROTOCOL_VERSION, readProtocolFile, readySchema, resultSchema, type Job, type Ready, type Result } from "./protocol.ts";
import { envValue, ompThreads } from "../../util/env.ts";

const LAUNCHER = join(ADAPTER_DIR, "launch.py");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Python finds a user's target module from the working directory first (like a module-path subject). */
export function pythonPath(env: NodeJS.ProcessEnv = process.env): string {
  return [process.cwd(), envValue("PYTHONPATH", env)].filter(Boolean).join(":");
}

/** The last `n` lines of a session's output (torchrun and every rank, interleaved), the cause first. */
export function tailOf(path: string, n = 25): string {
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

export class AdapterStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AdapterStartError";
  }
}

/** What a session is for: a new session starts when any part differs from the current one's. */
export interface SessionKey {
  world: number;
  python: string;
  device: TorchOptions["device"];
  /** Targets that keep process-wide state (an Accelerator, deepspeed's comm backend) get a session of their own. */
  isolation: string;
}

const sameKey = (a: SessionKey, b: SessionKey) => a.world === b.world && a.python === b.python && a.device === b.device && a.isolation === b.isolation;

/**
 * One job's files, each in its rank's private folder: the job, the rank's shards (in, and clipped in place by
 * the adapter, out) and its result.
 */
export interface JobFiles {
  job(rank: number): string;
  grads(rank: number): string;
  result(rank: number): string;
}

export interface JobOutcome {
  files: JobFiles;
  /** Index = rank; undefined where the rank wrote nothing (hang, crash) or something unreadable. */
  results: (Result | undefined)[];
  /** A hang, a crash or an unreadable result: fails the cell's liveness. */
  failure: string | null;
  /** Wall time from the first job file written to the last result read. */
  seconds: number;
}

export class TorchSession {
  readonly dir: string;
  readonly log: string;
  private proc: { readonly pid?: number } | null = null;
  private exit: { code: number | null; signal: string | null } | null = null;
  private next = 0;
  readonly startedAt = performance.now();
  /** Seconds from launch to every rank ready. */
  startSeconds = 0;
  info: Ready | null = null;

  /**
   * Each rank's private folder: a random name inside the session folder, which nobody may list once the ranks
   * start (mode 0300). A rank learns its own name from `rank-R.secret` and deletes that file before any
   * target code loads on any rank (the adapter waits for every rank first), so a target finds no other
   * rank's input in a folder it can list or name.
   */
  private readonly rankDirs: string[];

  private constructor(
    readonly key: SessionKey,
    private readonly options: TorchOptions,
  ) {
    const base = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();
    this.dir = mkdtempSync(join(base, "clip-parity-torch-"));
    this.log = join(this.dir, "adapter.log");
    this.rankDirs = Array.from({ length: key.world }, (_, r) => {
      const name = randomBytes(16).toString("hex");
      mkdirSync(join(this.dir, name), { mode: 0o700 });
      writeFileAtomic(join(this.dir, `rank-${r}.secret`), name);
      return join(this.dir, name);
    });
  }

  get world(): number {
    return this.key.world;
  }

  /**
   * `setup`: the subject's convention's setup calls, which the ranks make before they say they are ready (the
   * adapter's Targets.session_setup): a target's one-time work counts in the start, not in the first cell.
   */
  static async start(key: SessionKey, options: TorchOptions, setup: readonly unknown[] = []): Promise<TorchSession> {
    const s = new TorchSession(key, options);
    if (setup.length) writeFileAtomic(join(s.dir, "setup.json"), JSON.stringify(setup));
    const fd = openSync(s.log, "a");
    chmodSync(s.dir, 0o300); // after its last entry by name: from here on nobody lists it
    const env: Record<string, string> = {
      OMP_NUM_THREADS: ompThreads("1"),
      PYTHONUNBUFFERED: "1",
      PYTHONWARNINGS: "ignore",
      PYTHONDONTWRITEBYTECODE: "1", // no __pycache__ in adapters/ or in the user's tree
      PYTHONPATH: pythonPath(),
      // A rank stuck in a collective gives up a little after the harness has ended the session.
      CLIP_PARITY_TORCH_PG_TIMEOUT_S: String(options.cellTimeoutS + 60),
      CLIP_PARITY_TORCH_DEVICE: key.device,
      ...(options.keep ? { CLIP_PARITY_TORCH_KEEP: "1" } : {}),
      ...options.env,
    };
    // launch.py: a child subreaper between this process and torchrun, which kills everything below it
    // when this process is gone (even by SIGKILL) or ends the session, and then removes the session folder
    const proc = execa(
      key.python,
      [LAUNCHER, String(process.pid), s.dir, "--", "-m", "torch.distributed.run", "--standalone", `--nproc-per-node=${key.world}`, ADAPTER, "serve", s.dir],
      // A raw file descriptor (execa passes it to the child as is; its types only list stream values): no
      // pipe through this process, so an open session never keeps the harness alive.
      { stdin: "ignore", stdout: fd as unknown as "inherit", stderr: fd as unknown as "inherit", detached: true, reject: false, cleanup: false, env, cwd: PROJECT_ROOT },
    );
    closeSync(fd); // the child has its own copy
    s.proc = proc;
    proc.unref(); // a session left open must not keep the harness alive; the exit hook kills it
    live.add(s);
    installExitHook();
    void proc.then((r) => {
      s.exit = { code: r.exitCode ?? null, signal: r.signal ?? null };
    });
    if (options.verbose) process.stderr.write(`clip-parity: torch adapter (${key.world} ranks) logs to ${s.log}\n`);
    const deadline = performance.now() + options.startTimeoutS * 1000;
    const ready = Array.from({ length: key.world }, (_, r) => join(s.dir, `ready-${r}.json`));
    const missing = await s.waitFor(ready, deadline);
    if (missing.length) {
      const why = s.exit ? `torchrun exited (${s.describeExit()})` : `ranks ${missing.join(",")} were not ready after ${((performance.now() - s.startedAt) / 1000).toFixed(0)} s`;
      const tail = tailOf(s.log);
      s.kill();
      throw new AdapterStartError(`the PyTorch adapter did not start: ${why}\n${tail}`);
    }
    try {
      const infos = ready.map((p) => readProtocolFile(readySchema, p));
      const wrong = infos.find((i) => i.protocol !== PROTOCOL_VERSION);
      if (wrong) {
        throw new Error(
          `rank ${wrong.rank} speaks protocol ${wrong.protocol}, this harness ${PROTOCOL_VERSION}: adapters/torch/adapter.py and ` +
            "harness/external/torch/protocol.ts come from different versions of clip-parity",
        );
      }
      s.info = infos[0]!;
    } catch (err) {
      s.kill();
      throw new AdapterStartError(`the PyTorch adapter did not start: ${(err as Error).message}`);
    }
    s.startSeconds = (performance.now() - s.startedAt) / 1000;
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

  /**
   * Waits until every path exists, the process exits or the deadline passes; returns the indices missing. Polls
   * at most 2 ms apart: a longer back-off (20 ms) cost every cell about 10 ms of waiting.
   */
  private async waitFor(paths: string[], deadline: number): Promise<number[]> {
    let delay = 1;
    for (;;) {
      const missing = paths.flatMap((p, i) => (existsSync(p) ? [] : [i]));
      if (!missing.length || this.exit || performance.now() > deadline) return missing;
      await sleep(delay);
      delay = Math.min(delay * 1.5, 2);
    }
  }

  /** The next job's files, in each rank's private folder. */
  newJob(): JobFiles {
    const n = this.next++;
    const at = (name: string) => (rank: number) => join(this.rankDirs[rank]!, `${name}-${n}`);
    const [job, grads, result] = [at("job"), at("in"), at("result")];
    return { job: (r) => `${job(r)}.json`, grads: (r) => `${grads(r)}.safetensors`, result: (r) => `${result(r)}.json` };
  }

  /** One cell: writes every rank's job (validated first), waits for every rank's result. */
  async runJob(files: JobFiles, jobs: (rank: number) => Job, timeoutMs: number): Promise<JobOutcome> {
    const started = performance.now();
    for (let r = 0; r < this.world; r++) writeFileAtomic(files.job(r), JSON.stringify(checkJob(jobs(r))));
    const paths = Array.from({ length: this.world }, (_, r) => files.result(r));
    const missing = await this.waitFor(paths, started + timeoutMs);
    let failure: string | null = null;
    const results = paths.map((p) => {
      if (!existsSync(p)) return undefined;
      try {
        return readProtocolFile(resultSchema, p);
      } catch (err) {
        failure ??= `the PyTorch adapter wrote an unreadable result: ${(err as Error).message}`;
        return undefined;
      }
    });
    if (missing.length) {
      const ranks = missing.join(",");
      failure = this.exit
        ? `the PyTorch adapter crashed (${this.describeExit()}) before rank(s) ${ranks} finished the cell`
        : `the PyTorch adapter did not finish within ${(timeoutMs / 1000).toFixed(0)} s: rank(s) ${ranks} never returned ` +
          "(a hang: a rank waits in a collective that the others never issued)";
      failure += `; its last output:\n${this.tail()}`;
      this.kill();
    } else if (failure) {
      // A rank that cannot be understood may be out of step with the others: start afresh.
      this.kill();
    }
    return { files, results, failure, seconds: (performance.now() - started) / 1000 };
  }

  /** Removes one job's files (unless asked to keep them). */
  dropJob(files: JobFiles): void {
    if (this.options.keep) return;
    for (let r = 0; r < this.world; r++) for (const f of [files.job(r), files.grads(r), files.result(r)]) rmSync(f, { force: true });
  }

  /** Asks the adapter to quit and waits a little; kills it otherwise. */
  async close(): Promise<void> {
    if (this.alive) {
      const files = this.newJob();
      for (let r = 0; r < this.world; r++) writeFileAtomic(files.job(r), JSON.stringify({ protocol: PROTOCOL_VERSION, kind: "quit" }));
      const deadline = performance.now() + 10_000;
      while (this.alive && performance.now() < deadline) await sleep(20);
    }
    this.kill();
  }

  /**
   * Ends the session: every rank by the pid it wrote when ready (torchrun starts each in a session of its
   * own), and the launcher, which kills torchrun and everything else below it (a rank that never got that
   * far, or one whose torchrun died first, notices that its parent or the session directory is gone, and
   * exits). Then removes the session directory.
   */
  kill(): void {
    live.delete(this);
    if (current === this) current = null;
    const pids: number[] = [];
    for (let r = 0; r < this.world; r++) {
      try {
        pids.push(readProtocolFile(readySchema, join(this.dir, `ready-${r}.json`)).pid);
      } catch {
        // not ready yet
      }
    }
    const pid = this.proc?.pid;
    const signal = (target: number, sig: NodeJS.Signals) => {
      try {
        process.kill(target, sig);
      } catch {
        // already gone
      }
    };
    // Only while the launcher lives: the ranks are then below it, so their pids cannot have been reused.
    // The ranks die at once; the launcher (SIGTERM) kills whatever else runs below it (a target's own
    // processes, detached or not) and exits.
    if (pid !== undefined && this.exit === null) {
      for (const p of pids) if (Number.isInteger(p) && p > 1) signal(p, "SIGKILL");
      signal(pid, "SIGTERM");
    }
    try {
      chmodSync(this.dir, 0o700); // listable again: to be removed, or read when kept
    } catch {
      // the launcher removed it first
    }
    if (!this.options.keep) rmSync(this.dir, { recursive: true, force: true });
  }
}

const live = new Set<TorchSession>();
let current: TorchSession | null = null;

function killAll(): void {
  for (const s of [...live]) s.kill();
}

function installExitHook(): void {
  onExitOrSignal(killAll);
}

/**
 * Null when every process group is still in step after a cell: each group's members issued the same number
 * of collectives (`groupCalls`) and no rank failed in the adapter. Otherwise why not: the session must end,
 * since its next collective on that group would pair with the wrong call.
 */
export function groupsOutOfStep(results: readonly (Result | undefined)[]): string | null {
  for (const r of results) {
    if (!r) return "a rank wrote no result";
    if (r.adapterError) return `rank ${r.rank} failed in the adapter`;
    if (!r.groupCalls) return `rank ${r.rank} reported no collective counts`;
  }
  const groups = new Set(results.flatMap((r) => Object.keys(r!.groupCalls!)));
  for (const g of groups) {
    if (!/^\d+(,\d+)*$/.test(g)) return `a collective ran on a group the adapter could not name ("${g}")`;
    const members = g.split(",").map(Number);
    const counts = members.map((m) => results[m]?.groupCalls?.[g] ?? 0);
    if (new Set(counts).size > 1) return `group [${g}]: its ranks issued ${counts.join(", ")} collectives`;
  }
  return null;
}

/** The session for `key`: the current one when it fits, else a fresh one (the old one ends first). */
export async function sessionFor(key: SessionKey, options: TorchOptions, setup: readonly unknown[] = []): Promise<TorchSession> {
  if (current && current.alive && sameKey(current.key, key)) return current;
  if (current) await current.close();
  current = await TorchSession.start(key, options, setup);
  return current;
}

/** Ends every adapter session (tests call it in afterAll; the CLI relies on the exit hook). */
export async function closeTorchSessions(): Promise<void> {
  await Promise.all([...live].map((s) => s.close()));
  current = null;
}

/** The pids of every live session's torchrun (tests check that none is left behind). */
export function liveSessionCount(): number {
  return live.size;
}

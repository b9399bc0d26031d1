/**
 * `npm run main-job`: runs the README's main job (the cpu matrix through the command line, its sections included)
 * and the README's `plan` example as a user runs them, each a child process under /usr/bin/time, and writes what
 * they took to docs/main-job.json: wall seconds, the peak resident set (of the largest process, as /usr/bin/time
 * reports it: the child that runs the cells and their worker threads under `run`'s supervisor), the machine's
 * cores and load average at the start, the commit. The README's durations and memory are
 * figures read from that file (scripts/readme-figures.ts), so they are always the last measured run, never typed.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeFileAtomic } from "../harness/util/fs.ts";
import { MAIN_JOB_DATA, PLAN_EXAMPLE } from "./readme-figures.ts";

const ROOT = join(import.meta.dirname, "..");

export interface MainJobData {
  commit: string;
  date: string;
  cores: number;
  loadAverageAtStart: number;
  mainJob: { command: string; exitCode: number; wallSeconds: number; peakRssBytes: number; verdictLine: string };
  plan: { command: string; exitCode: number; wallSeconds: number };
}

/** A command under /usr/bin/time: its exit code, wall seconds, peak resident set and stdout. */
function timed(args: string[]): { exitCode: number; wallSeconds: number; peakRssBytes: number; stdout: string } {
  const dir = mkdtempSync(join(tmpdir(), "clip-parity-main-job-"));
  try {
    const report = join(dir, "time.txt");
    const r = spawnSync("/usr/bin/time", ["-f", "%e %M", "-o", report, process.execPath, join(ROOT, "bin", "clip-parity.js"), ...args], { cwd: ROOT, encoding: "utf8", maxBuffer: 1 << 28, env: { ...process.env, CI: "" } });
    const [wall, kb] = readFileSync(report, "utf8").trim().split("\n").at(-1)!.split(" ").map(Number);
    return { exitCode: r.status ?? -1, wallSeconds: wall!, peakRssBytes: kb! * 1024, stdout: r.stdout };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function main(): number {
  const load = loadavg()[0]!;
  const out = mkdtempSync(join(tmpdir(), "clip-parity-main-job-out-"));
  try {
    const jobArgs = ["run", "--matrix", "cpu", "--json", join(out, "cpu.json"), "--quiet"];
    process.stderr.write(`main job: clip-parity ${jobArgs.join(" ")} (load average ${load.toFixed(1)} on ${cpus().length} cores)...\n`);
    const job = timed(jobArgs);
    const plan = timed(PLAN_EXAMPLE);
    const data: MainJobData = {
      commit: execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim(),
      date: new Date().toISOString().slice(0, 10),
      cores: cpus().length,
      loadAverageAtStart: Math.round(load * 10) / 10,
      mainJob: { command: "clip-parity run --matrix cpu --json out/cpu.json", exitCode: job.exitCode, wallSeconds: job.wallSeconds, peakRssBytes: job.peakRssBytes, verdictLine: job.stdout.trimEnd().split("\n").at(-1) ?? "" },
      plan: { command: `clip-parity ${PLAN_EXAMPLE.join(" ")}`, exitCode: plan.exitCode, wallSeconds: plan.wallSeconds },
    };
    writeFileAtomic(MAIN_JOB_DATA, `${JSON.stringify(data, null, 2)}\n`);
    process.stdout.write(`wrote ${MAIN_JOB_DATA}: main job exit ${job.exitCode} in ${job.wallSeconds} s, peak ${(job.peakRssBytes / 1e9).toFixed(1)} GB; plan ${plan.wallSeconds} s\n`);
    return job.exitCode === 0 && plan.exitCode === 0 ? 0 : 1;
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main();

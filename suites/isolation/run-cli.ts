/** The command line as a user runs it, for the isolation suites: exit code, output and wall time. */
import { execFile } from "node:child_process";
import { resolve } from "node:path";

export const ROOT = resolve(import.meta.dirname, "../..");

export function cli(args: string[], timeoutMs = 120_000): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
  const started = performance.now();
  return new Promise((done) => {
    const env = { ...process.env };
    for (const k of Object.keys(env)) if (k.startsWith("CLIP_PARITY_")) delete env[k];
    execFile(process.execPath, ["bin/clip-parity.js", ...args], { cwd: ROOT, timeout: timeoutMs, env }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
      done({ code, stdout, stderr, ms: performance.now() - started });
    });
  });
}


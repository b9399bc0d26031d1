/** What the suites that watch for leftover processes share: which processes are live, and waiting on a condition. */
import { readdirSync, readFileSync } from "node:fs";

/**
 * Pids of live processes (this one aside) whose `/proc/PID/<file>` holds `text`: `cmdline` for what was started,
 * `environ` for a marker set in the environment (a zombie has no environment left; threads are no processes).
 */
export function processesWith(text: string, file: "cmdline" | "environ" = "cmdline"): number[] {
  const out: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${e}/${file}`, "utf8").includes(text)) out.push(Number(e));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** True as soon as `cond` holds, polled every 100 ms; its last value after `ms`. */
export async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (cond()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return cond();
}

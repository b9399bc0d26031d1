/**
 * No process left behind (issue 21): a `torch:` target that starts processes of its own (in their own
 * session, double-forked), and a harness killed with SIGKILL in the middle of a cell, leave no torchrun,
 * rank or grandchild process and no session folder. adapters/torch/launch.py, a child subreaper between the
 * harness and torchrun, kills everything below it when the harness is gone or ends the session.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { processesWith, until } from "../processes.ts";
import { PROJECT_ROOT } from "../../harness/external/torch/options.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();
const SHM = existsSync("/dev/shm") ? "/dev/shm" : "/tmp";
const sessions = () => new Set(readdirSync(SHM).filter((d) => d.startsWith("clip-parity-torch-")));



const started: { marker: string; child?: ChildProcess }[] = [];
afterAll(() => {
  // whatever a failing run left: killed here, so that one failure does not leave work behind
  for (const s of started) for (const pid of processesWith(s.marker)) process.kill(pid, "SIGKILL");
});

function cell(target: string, marker: string): ChildProcess {
  const args = ["bin/clip-parity.js", "cell", "--subject", `torch:leftovers:${target}`, "--layout", "dp_shard2", "--model", "llama3-debug", "--dtype", "f32", "--norm", "2", "--regime", "active"];
  const env = { ...process.env, CLIP_PARITY_TEST_MARKER: marker, PYTHONPATH: [join(PROJECT_ROOT, "suites", "torch", "fixtures"), process.env.PYTHONPATH].filter(Boolean).join(":") };
  const child = spawn(process.execPath, args, { cwd: PROJECT_ROOT, env, stdio: "ignore" });
  started.push({ marker, child });
  return child;
}

describe.runIf(torch.run)("no process left behind", () => {
  it("a target's detached processes end with the harness", { timeout: 180_000 }, async () => {
    const before = sessions();
    const marker = `clip-parity-leftover-${randomUUID()}`;
    const child = cell("spawns_detached", marker);
    await new Promise((r) => child.on("exit", r));
    expect(await until(() => processesWith(marker).length === 0, 10_000), `left running: ${processesWith(marker).join(", ")}`).toBe(true);
    expect([...sessions()].filter((d) => !before.has(d))).toEqual([]);
  });

  it("a harness killed with SIGKILL mid-cell leaves no torchrun, rank, grandchild or session folder", { timeout: 180_000 }, async () => {
    const before = sessions();
    const marker = `clip-parity-leftover-${randomUUID()}`;
    const child = cell("spawns_then_sleeps", marker);
    // the cell is running once the target's helpers exist (one per rank, each forked once)
    expect(await until(() => processesWith(marker).length >= 4, 150_000), "the target never started").toBe(true);
    const mine = [...sessions()].filter((d) => !before.has(d));
    expect(mine.length).toBe(1);
    child.kill("SIGKILL");
    const session = join(SHM, mine[0]!);
    expect(await until(() => processesWith(marker).length === 0 && processesWith(session).length === 0, 10_000), `left: ${[...processesWith(marker), ...processesWith(session)].join(", ")}`).toBe(true);
    expect(await until(() => !existsSync(session), 5_000)).toBe(true);
  });
});

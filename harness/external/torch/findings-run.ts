/**
 * Runs a framework file's findings: the scripts of adapters/torch/findings/ that show a cause through the
 * framework's own entry point (deepspeed.initialize and engine.step rather than the functions under it), standalone
 * under torchrun as a maintainer would run them. Each rank prints one line ("rank R (...): step raised ...",
 * "... hang: ..."); those lines, in rank order, are what the frameworks page shows and a fresh run must print again.
 */
import { join } from "node:path";
import { execa } from "execa";
import type { FindingRecord } from "../frameworks-run.ts";
import type { Framework } from "./frameworks.ts";
import { PROJECT_ROOT } from "./options.ts";

/** A finding's run as a maintainer types it, from the project root. */
export function findingCommand(script: string, run: Framework["findings"][number]["runs"][number]): string {
  return ["torchrun", "--standalone", `--nproc-per-node ${run.nprocPerNode}`, script, ...run.args].join(" ");
}

/** The one line each rank printed ("rank R ..."), in rank order (torchrun interleaves the ranks' output). */
export function rankLines(stdout: string): string[] {
  // a line another rank's write ran into is split at each "rank R (" it holds
  const lines = stdout.split("\n").flatMap((l) => l.split(/(?=rank \d+ \()/)).filter((l) => /^rank \d+\b/.test(l));
  return lines.sort((a, b) => Number(/^rank (\d+)/.exec(a)![1]) - Number(/^rank (\d+)/.exec(b)![1]));
}

/** Runs every run of a framework's findings; a run that outlives `timeoutMs` reads as exit code -1 with the lines printed until then. */
export async function runFindings(fw: Framework, python: string, timeoutMs = 300_000): Promise<FindingRecord[]> {
  const out: FindingRecord[] = [];
  for (const f of fw.findings) {
    const runs: FindingRecord["runs"] = [];
    for (const run of f.runs) {
      const started = performance.now();
      const r = await execa(python, ["-m", "torch.distributed.run", "--standalone", `--nproc-per-node=${run.nprocPerNode}`, join(PROJECT_ROOT, f.script), ...run.args], {
        reject: false,
        cwd: PROJECT_ROOT,
        env: { OMP_NUM_THREADS: "1", PYTHONPATH: "", PYTHONWARNINGS: "ignore" },
        extendEnv: true,
        timeout: timeoutMs,
      });
      runs.push({ label: run.label, command: findingCommand(f.script, run), lines: rankLines(String(r.stdout ?? "")), exitCode: r.exitCode ?? -1, seconds: (performance.now() - started) / 1000 });
    }
    out.push({ cause: f.cause, script: f.script, why: f.why, runs });
  }
  return out;
}

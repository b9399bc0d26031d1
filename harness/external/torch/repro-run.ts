/**
 * Runs a script written by `clip-parity export` the way a framework's maintainer would: standalone under
 * torchrun, from its own folder, with nothing of this project on the Python path. `npm run frameworks` runs
 * the script of every failure it lists through this, so a failure on docs/frameworks.md is one that
 * reproduces without clip-parity; the export tests use it too.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { execa } from "execa";
import { worldSize } from "../../layout/layout.ts";
import type { FrameworkCellRecord, FrameworksData } from "../frameworks-run.ts";
import { exportCell, parseCellId, SCRIPT_CHECKS } from "./export.ts";
import { cellSeverity } from "../causes.ts";
import { COST_PAIRS, noteCost, type NoteCost } from "../note-cost.ts";

export interface ReproRun {
  exitCode: number;
  /** The script's verdict line: it printed REPRODUCED (and exited 1). */
  reproduced: boolean;
  /** The checks it found failing (its `FAIL check: ...` lines), in its order. */
  failed: string[];
  stdout: string;
  stderr: string;
  seconds: number;
  /** REPRO_COST_PAIRS=N: each pair's seconds for the clip and for the script's fused variant (its COST line), or why it timed nothing. */
  cost: { clip: number[]; fused: number[] } | string | null;
}


/** Runs the script at `path` on `world` CPU ranks (gloo) under `python -m torch.distributed.run --standalone`. */
export async function runExportedScript(path: string, world: number, python: string, timeoutMs = 300_000, env: Record<string, string> = {}): Promise<ReproRun> {
  const started = performance.now();
  const r = await execa(python, ["-m", "torch.distributed.run", "--standalone", `--nproc-per-node=${world}`, path], {
    reject: false,
    cwd: dirname(path),
    env: { OMP_NUM_THREADS: "1", PYTHONPATH: "", PYTHONWARNINGS: "ignore", REPRO_DEVICE: "cpu", ...env },
    extendEnv: true,
    timeout: timeoutMs,
  });
  const stdout = String(r.stdout ?? "");
  const costLine = /^COST (.+)$/m.exec(stdout)?.[1];
  return {
    exitCode: r.exitCode ?? -1,
    reproduced: r.exitCode === 1 && /^REPRODUCED$/m.test(stdout),
    failed: [...stdout.matchAll(/^FAIL (\S+):/gm)].map((m) => m[1]!),
    stdout,
    stderr: String(r.stderr ?? ""),
    seconds: (performance.now() - started) / 1000,
    cost: costLine ? (JSON.parse(costLine) as { clip: number[]; fused: number[] } | string) : null,
  };
}

/**
 * Whether a script's failed checks are the finding clip-parity listed: every failed check the script implements
 * (SCRIPT_CHECKS) fails in the script too, and a hang is a hang in both (a script reports nothing else then). A
 * script that failed other checks (e.g. parity.norm because it raised an error of its own) did not reproduce it.
 */
export function sameFindings(listed: readonly string[], script: readonly string[]): boolean {
  if (listed.includes("liveness")) return script.includes("liveness");
  return listed.filter((c) => SCRIPT_CHECKS.has(c)).every((c) => script.includes(c)) && !script.includes("liveness");
}

/** A performance note's cost: its script exported with the fused variant, run with REPRO_COST_PAIRS (note-cost.ts). */
async function timeNote(id: string, dir: string, records: FrameworksData, full: boolean, python: string): Promise<{ cost: NoteCost } | { costNotTimed: string }> {
  const { path, data: x } = await exportCell({ cell: parseCellId(id), outDir: dir, run: false, records, full, cost: true });
  const run = await runExportedScript(path, worldSize(x.cell.layout), python, 300_000, { REPRO_COST_PAIRS: String(COST_PAIRS) });
  if (typeof run.cost === "object" && run.cost) return { cost: noteCost(run.cost) };
  return { costNotTimed: typeof run.cost === "string" ? run.cost : `the script printed no COST line (exit ${run.exitCode})` };
}

/** The failures a frameworks run lists as the framework's (in its configurations), as cells of torch:<framework>. */
export function listedFailures(data: FrameworksData): { framework: string; rec: FrameworkCellRecord; id: string }[] {
  return data.frameworks.flatMap((fw) =>
    fw.cells.filter((rec) => rec.status === "fail" && !rec.outside).map((rec) => ({ framework: fw.name, rec, id: `torch:${fw.name}/${rec.case}` })),
  );
}

/**
 * Exports the script of every failure `data` lists (with that run's record in its header, nothing re-run by
 * clip-parity) and runs it standalone; sets each record's `repro`. A minimised script (a failure of the layout alone)
 * that does not reproduce it is followed by the whole cell's, and the record is of that one. Returns how many
 * reproduced, of how many.
 */
export async function reproduceListedFailures(
  data: FrameworksData,
  python: string,
  onCell?: (id: string, repro: NonNullable<FrameworkCellRecord["repro"]>, run: ReproRun) => void,
  frameworks?: readonly string[],
): Promise<{ reproduced: number; of: number }> {
  const dir = mkdtempSync(join(tmpdir(), "clip-parity-repros-"));
  let reproduced = 0;
  // only these frameworks' failures (the others keep the `repro` their own run recorded)
  const failures = listedFailures(data).filter((f) => !frameworks || frameworks.includes(f.framework));
  try {
    for (const { rec, id } of failures) {
      for (const full of [false, true]) {
        // the minimised script first where there is one; the whole cell's only if that one did not reproduce it
        const { path, data: x } = await exportCell({ cell: parseCellId(id), outDir: dir, run: false, records: data, full });
        const run = await runExportedScript(path, worldSize(x.cell.layout), python);
        const same = run.reproduced && sameFindings(rec.failed, run.failed);
        rec.repro = { lines: x.script.split("\n").length - 1, reproduced: same, failed: run.failed, minimised: x.minimised };
        // a performance note that reproduced: the same script with its fused variant, timed against it (the note's cost)
        if (same && cellSeverity(rec) === "performance note") Object.assign(rec.repro, await timeNote(id, dir, data, full, python));
        onCell?.(id, rec.repro, run);
        if (same || !x.minimised) break;
      }
      if (rec.repro!.reproduced) reproduced++;
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return { reproduced, of: failures.length };
}

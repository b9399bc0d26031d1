/**
 * Cross-backend parity: a cell run on the cpu backend and on the cuda backend, compared.
 *
 * - `exact` tolerance (the `exact` and `reference` subjects): every rank's norm and every local
 *   gradient's content hash after the clip must be bitwise equal on both backends.
 * - other subjects (fp32 / bf16 classes): every rank's norm within the class of the cpu's norm
 *   (|a - b| <= 4 * 2^-24 * |a| for fp32, 2^-8 for bf16); where the norms are bitwise equal, the
 *   clipped gradients must be too (same coefficient, same rounding); where they differ by an ulp,
 *   the cuda cell's own checks (parity.tensors: each element equals round(g * c) of its own c) judge.
 * - both runs: every check passes (correct subjects), the ledger returns to zero.
 *
 * Used by suites/cuda/parity.test.ts and, on a GPU machine, by scripts/gpu-check.sh through it.
 */
import { BUILTIN_SUBJECTS } from "../../harness/registry/registry.ts";
import type { CellResult } from "../../harness/results/types.ts";
import { cellId, type Cell } from "../../harness/cell/cell.ts";
import { runCell } from "../../harness/execute/cell.ts";
import type { BackendKind } from "../../harness/backend/backend.ts";

export interface ParityRow {
  id: string;
  tolerance: string;
  /** rank 0's norm on each backend */
  cpuNorm: number | null;
  cudaNorm: number | null;
  /** every rank's norm bitwise equal */
  normsBitwise: boolean;
  /** every local gradient's hash equal after the clip */
  hashesEqual: boolean;
  tensors: number;
  problems: string[];
  ms: { cpu: number; cuda: number };
}

interface Run {
  result: CellResult;
  hashes: string[][];
}

async function runOn(cell: Cell, backend: BackendKind): Promise<Run> {
  const subject = BUILTIN_SUBJECTS[cell.subject];
  if (!subject) throw new Error(`unknown subject ${cell.subject}`);
  let hashes: string[][] = [];
  const result = await runCell(cell, {
    backend,
    subject,
    inspect: (ctx) => {
      hashes = ctx.grads.map((gs) => gs.map((g) => (g ? ctx.backend.hash(g) : "-")));
    },
  });
  return { result, hashes };
}

const bits = (x: number | undefined | null): string => {
  if (x === undefined || x === null) return String(x);
  const b = new DataView(new ArrayBuffer(8));
  b.setFloat64(0, x);
  return Number.isNaN(x) ? "NaN" : b.getBigUint64(0).toString(16);
};

/** Runs `cell` on cpu and cuda and compares them (see the module comment). */
export async function parityOf(cell: Cell): Promise<ParityRow> {
  const cpu = await runOn(cell, "cpu");
  const cuda = await runOn(cell, "cuda");
  const tolerance = BUILTIN_SUBJECTS[cell.subject].tolerance ?? "fp32";
  const problems: string[] = [];
  for (const [name, r] of [
    ["cpu", cpu],
    ["cuda", cuda],
  ] as const) {
    for (const c of r.result.checks) if (c.status === "fail") problems.push(`${name}: ${c.id} failed: ${c.message.split("\n")[0]}`);
  }
  let normsBitwise = true;
  const eps = tolerance === "bf16" ? 2 ** -8 : 2 ** -24;
  cpu.result.ranks.forEach((a, r) => {
    const b = cuda.result.ranks[r];
    if (a.error !== b?.error) problems.push(`rank ${r}: error "${a.error}" on cpu, "${b?.error}" on cuda`);
    const same = bits(a.norm) === bits(b?.norm);
    if (!same) {
      normsBitwise = false;
      if (tolerance === "exact") problems.push(`rank ${r}: norm ${a.norm} (cpu) != ${b?.norm} (cuda), bitwise`);
      else if (!(Math.abs((a.norm ?? NaN) - (b?.norm ?? NaN)) <= 4 * eps * Math.abs(a.norm ?? NaN)))
        problems.push(`rank ${r}: norm ${a.norm} (cpu) and ${b?.norm} (cuda) differ by more than the ${tolerance} class`);
    }
  });
  let hashesEqual = true;
  let tensors = 0;
  cpu.hashes.forEach((hs, r) =>
    hs.forEach((h, i) => {
      tensors++;
      const g = cuda.hashes[r]?.[i];
      if (h !== g) {
        hashesEqual = false;
        if (tolerance === "exact" || normsBitwise)
          problems.push(`rank ${r} gradient ${i}: hash ${h} (cpu) != ${g} (cuda) after the clip`);
      }
    }),
  );
  return {
    id: cellId(cell),
    tolerance,
    cpuNorm: cpu.result.totalNorm,
    cudaNorm: cuda.result.totalNorm,
    normsBitwise,
    hashesEqual,
    tensors,
    problems,
    ms: { cpu: cpu.result.durationMs, cuda: cuda.result.durationMs },
  };
}

/** One line per cell for logs. */
export function formatRow(r: ParityRow): string {
  const verdict = r.problems.length ? "FAIL" : "ok";
  return (
    `${verdict.padEnd(4)} ${r.id}  [${r.tolerance}] norm cpu ${r.cpuNorm} cuda ${r.cudaNorm} ` +
    `${r.normsBitwise ? "bitwise" : "within class"}; ${r.tensors} gradients ${r.hashesEqual ? "bitwise equal" : "not all equal"}` +
    `  (${r.ms.cpu.toFixed(0)} / ${r.ms.cuda.toFixed(0)} ms)` +
    (r.problems.length ? `\n       ${r.problems.join("\n       ")}` : "")
  );
}

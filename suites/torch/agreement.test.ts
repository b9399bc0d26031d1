/**
 * The reference agrees with PyTorch (SPEC §6, issue 7): torch.nn.utils.clip_grad_norm_ on the full
 * gradients of a set of cells, on one rank (harness/external/torch-agreement.ts, adapters/torch/agree.py).
 *
 * Results are kept in golden/torch-agreement.json with the torch version that produced them; rewrite it with
 * `CLIP_PARITY_UPDATE_GOLDEN=1 npx vitest run suites/torch/agreement.test.ts` (refused under CI=true).
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { agreementGolden, runAgreement, type Agreement } from "../../harness/external/torch-agreement.ts";
import { PROJECT_ROOT } from "../../harness/external/torch/options.ts";
import { isCI } from "../../harness/util/env.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();
const GOLDEN = join(PROJECT_ROOT, "golden", "torch-agreement.json");

/**
 * torch's CPU float32 norm accumulates in float32 (torch.linalg.vector_norm of 4M uniform float32 values is
 * off by about 7e-5 relative with 2 threads), so on one rank, with whole tensors of up to 4M elements, stock
 * float32 clip_grad_norm_ does not meet the fp32 class (4 * 2^-24): it claims fp32-accum, whose bound grows
 * with the cell's element count (README "Tolerance classes"). Which cells meet the fp32 class itself is
 * recorded in the golden file (docs/torch.md).
 */

const same = (a: number, b: number) => Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b)) || a === b;

describe(`agreement of the reference with torch.nn.utils.clip_grad_norm_${torch.skipNote}`, () => {
  let result: Agreement | undefined;
  const agreement = (): Agreement => (result ??= runAgreement());

  it.runIf(torch.run)("runs torch on every agreement cell", () => {
    const a = agreement();
    expect(a.rows.length).toBeGreaterThan(10);
    expect(a.torch).toMatch(/^\d+\.\d+/);
  }, 900_000);

  it.runIf(torch.run)("gets the same gradients from SPEC §5 in numpy, bit for bit", () => {
    for (const r of agreement().rows) {
      expect(r.generator.mismatches, r.id).toEqual([]);
      expect(r.generator.elements, r.id).toBeGreaterThan(0);
    }
  });

  it.runIf(torch.run)("float64 clip_grad_norm_, rounded to float32, is the exact reference's norm", () => {
    for (const r of agreement().rows) {
      expect(same(r.float64.asFloat32, r.reference.totalNorm), `${r.id}: torch float64 ${r.float64.norm} vs reference ${r.reference.totalNorm}`).toBe(true);
      if (Number.isFinite(r.reference.float64Norm) && r.reference.float64Norm > 0) {
        expect(r.float64.relErr, `${r.id}: torch float64 ${r.float64.norm} vs S^(1/p) ${r.reference.float64Norm}`).toBeLessThanOrEqual(1e-12);
      }
    }
  });

  it.runIf(torch.run)("stock one-rank clip_grad_norm_ passes its class: float32 norms within fp32-accum, bfloat16 and float16 within bf16", () => {
    for (const r of agreement().rows) {
      expect(r.native.tolerance).toBe(r.cell.dtype === "f32" ? "fp32-accum" : "bf16");
      expect(r.native.within, `${r.id}: torch ${r.native.norm} vs reference ${r.reference.totalNorm} (${r.native.tolerance})`).toBe(true);
    }
  });

  it.runIf(torch.run)("clipped tensors follow the reference's rounding rule, round(float32(g) * c)", () => {
    for (const r of agreement().rows) {
      expect(r.tensors.mismatch, r.id).toBeNull();
      expect(r.tensors.checked, r.id).toBeGreaterThan(0);
      // float32: c is the reference's rule from torch's own norm; bf16/f16: torch computes c in that dtype.
      if (r.cell.dtype === "f32") expect(r.coef.sameAsRule, `${r.id}: torch coef ${r.coef.torch} vs rule ${r.coef.rule}`).toBe(true);
    }
  });

  it.runIf(torch.run)("matches golden/torch-agreement.json", () => {
    const a = agreement();
    const now = agreementGolden(a);
    if (process.env.CLIP_PARITY_UPDATE_GOLDEN === "1") {
      if (isCI()) throw new Error("goldens are updated only on request, never in CI");
      writeFileSync(GOLDEN, JSON.stringify(now, null, 2) + "\n");
      return;
    }
    expect(existsSync(GOLDEN), "golden/torch-agreement.json is missing: CLIP_PARITY_UPDATE_GOLDEN=1 npx vitest run suites/torch/agreement.test.ts").toBe(true);
    const golden = JSON.parse(readFileSync(GOLDEN, "utf8")) as ReturnType<typeof agreementGolden> & {
      header: { torch: string; threads: number };
      cells: Record<string, Record<string, unknown>>;
    };
    const nowCells = now.cells as Record<string, Record<string, unknown>>;
    expect(Object.keys(nowCells).sort()).toEqual(Object.keys(golden.cells).sort());
    // What must hold with any torch: the exact reference, the float64 result, the rule and the generator.
    const stable = ["maxNorm", "referenceNorm", "torchFloat64AsFloat32", "tensorsMatchTorchCoef", "generatorElements", "generatorMismatches"];
    const exactRun = golden.header.torch === a.torch && golden.header.threads === a.threads;
    for (const [id, cell] of Object.entries(golden.cells)) {
      const got = nowCells[id]!;
      if (exactRun) expect(got, id).toEqual(cell);
      else for (const k of stable) expect(got[k], `${id}.${k}`).toEqual(cell[k]);
    }
  });
});

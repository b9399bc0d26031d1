/**
 * docs/fp32-accum.json (`npm run fp32-accum`) records stock torch's error on every float32 cpu cell where
 * it computes the whole norm, against the fp32-accum bound; suites/strength/fp32-accum.test.ts judges the
 * margin from it. Here torch runs the file's worst cells again: the norms must be the ones recorded, so the
 * file cannot drift from what torch does.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { closeTorchSessions } from "../../harness/external/torch/subject.ts";
import { runMatrix } from "../../harness/run/runner.ts";
import { builtinMatrices } from "../../matrix/index.ts";
import { FP32_ACCUM_DATA, type AccumData } from "../../scripts/fp32-accum.ts";
import { torchAvailability } from "./torch-available.ts";

const torch = torchAvailability();
const data = JSON.parse(readFileSync(FP32_ACCUM_DATA, "utf8")) as AccumData;

describe(`stock torch on the worst cells of docs/fp32-accum.json${torch.skipNote}`, () => {
  it.runIf(torch.run)("gives the norms recorded there", { timeout: 600_000 }, async () => {
    try {
      for (const rec of data.cells.slice(0, 3)) {
        const id = rec.id.replace(/^torch:torch\//, "");
        const out = await runMatrix(builtinMatrices().cpu!, { subjects: ["torch:torch"], filter: id, golden: "off" });
        const r = out.results.find((x) => x.id === rec.id);
        expect(r, `${rec.id} did not run`).toBeDefined();
        expect(r!.totalNorm, rec.id).toBe(rec.norm);
        expect(r!.referenceNorm, rec.id).toBe(rec.reference);
      }
    } finally {
      await closeTorchSessions();
    }
  });
});

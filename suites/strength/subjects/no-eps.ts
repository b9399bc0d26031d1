/**
 * Test-local known-bad subject: `bucketed` whose clip coefficient leaves out torch's 1e-6
 * (max_norm / total_norm). On a large norm the float32 sum total_norm + 1e-6 rounds back to total_norm
 * and nothing shows; only a cell with a small norm and clip_coef < 1 catches it (parity.tensors): one of
 * the corners the cpu matrix covers by design (matrix/index.ts, clip corners).
 */
import { defineSubject, normFromPowerSum } from "../../../harness/subject/api.ts";
import { checkFinite, scaleAll } from "../../../harness/subject/common.ts";
import { bucketedPowerSum } from "../../../harness/subject/builtin/bucketed-core.ts";

export default defineSubject({
  name: "no-eps",
  description: "bucketed, but clip_coef = max_norm / total_norm (no + 1e-6)",
  tolerance: "fp32",
  catchBy: ["parity.tensors"],
  async clip(rank, args) {
    const { params, normType } = args;
    const total = await bucketedPowerSum(rank, args);
    const norm = normFromPowerSum(total, normType);
    checkFinite(norm, args);
    const f32 = Math.fround;
    scaleAll(rank, params, Math.min(1, f32(f32(args.maxNorm) / norm))); // BUG: torch adds 1e-6 to the norm
    return norm;
  },
});

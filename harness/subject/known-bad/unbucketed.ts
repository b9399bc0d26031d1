/**
 * `unbucketed`: the right norm, but one all_reduce per parameter over that parameter's reduction
 * group (then pp), like a per-DTensor `full_tensor()` of each local norm: hundreds of tiny
 * collectives per step where a handful would do. Caught by `comm.budget`.
 */
import { defineSubject } from "../api.ts";
import { combine, counts, finishClip, localPartial, reduceOp, reductionGroupOf } from "../common.ts";

export default defineSubject({
  name: "unbucketed",
  description: "right norm with one all_reduce per parameter",
  tolerance: "fp32",
  catchBy: ["comm.budget"],
  async clip(rank, args) {
    const { params, normType } = args;
    const op = reduceOp(normType);
    let total = 0;
    for (const p of params) {
      if (!counts(p)) continue;
      const reduced = await rank.allReduce(reductionGroupOf(rank, p), localPartial(rank.ops, p.grad, normType), op);
      total = combine(total, reduced, normType);
    }
    total = await rank.allReduce(rank.group("pp"), total, op);
    return finishClip(rank, args, total);
  },
});

/**
 * `padding-counted`: FSDP-style padded shards in the norm. FSDP pads every dim-0 shard to the even
 * chunk size ceil(n/k); a rank whose shard is shorter (uneven shards: the trailing chunks of
 * torch.chunk) computes its local norm on the padded buffer, whose padding rows hold stale data
 * instead of zeros. Modelled as the shard's first `pad` rows counted a second time. With even shards
 * it is correct. Caught by `parity.norm` (any layout with an uneven dim-0 shard, finite p).
 */
import { defineSubject, type Ops, type ParamView, type RankContext, type Tensor } from "../api.ts";
import { combine, localPartial, withSummedGrad } from "../common.ts";
import { bucketedClip } from "../builtin/bucketed-core.ts";

/** Rows of padding after this rank's shard: the even (padded) dim-0 length minus the real one. */
function paddingRows(rank: RankContext, p: ParamView): number {
  let even = p.globalShape[0] ?? 0;
  p.placements.forEach((x, i) => {
    if (x.kind === "shard" && x.dim === 0) even = Math.ceil(even / sizeOf(rank, p, i));
  });
  return Math.max(0, even - (p.block.len[0] ?? 0));
}

function sizeOf(rank: RankContext, p: ParamView, i: number): number {
  return rank.groupOf(p.mesh, [p.meshAxes[i]!]).ranks.length;
}

/** The norm^p of the padded local buffer: the shard plus `pad` stale rows (a copy of its first rows). */
function paddedPartial(ops: Ops, grad: Tensor, pad: number, normType: number): number {
  const local = localPartial(ops, grad, normType);
  const stale = Math.min(pad, grad.shape[0] ?? 0);
  if (stale === 0) return local;
  const rows = ops.narrow(grad, 0, 0, stale);
  const extra = localPartial(ops, rows, normType); // BUG: the padding is not zero and is counted
  ops.free(rows);
  return combine(local, extra, normType);
}

export default defineSubject({
  name: "padding-counted",
  description: "uneven FSDP shards: stale padding rows counted in the local norm",
  tolerance: "fp32",
  catchBy: ["parity.norm"],
  clip: (rank, args) =>
    bucketedClip(rank, args, {
      partial: (r, p, normType) => withSummedGrad(r, p, (g) => paddedPartial(r.ops, g, paddingRows(r, p), normType)),
    }),
});

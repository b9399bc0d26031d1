/**
 * `clip-parity cell --dump DIR`: a failing cell's tensors as safetensors, for a notebook or a
 * PyTorch script: the full logical gradients before clipping, after the reference clip, and the
 * subject's result assembled from its shards (canonical copies), plus cell.json.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Tensor } from "../subject/api.ts";
import type { LocalParam } from "../model/plan.ts";
import type { CheckContext } from "../checks/types.ts";
import { cellId } from "../cell/cell.ts";
import { writeFileAtomic } from "../util/fs.ts";
import { jsonNumber } from "../results/json.ts";

interface Shard {
  p: LocalParam;
  grad: Tensor;
}

/** Rebuilds a full tensor from shards that tile it (uneven and empty chunks included), by nested cat. */
function assemble(ctx: CheckContext, shards: Shard[], dim: number): Tensor {
  const b = ctx.backend;
  const ndim = shards[0].p.block.globalShape.length;
  if (dim === ndim || shards.length === 1) return b.cloneFor(0, shards[0].grad);
  const byStart = new Map<number, Shard[]>();
  for (const s of shards) {
    const k = s.p.block.start[dim];
    byStart.set(k, [...(byStart.get(k) ?? []), s]);
  }
  const parts = [...byStart.entries()].sort((a, b) => a[0] - b[0]).map(([, group]) => assemble(ctx, group, dim + 1));
  const whole = parts.length === 1 ? b.cloneFor(0, parts[0]) : b.catFor(0, parts, dim);
  for (const t of parts) b.free(t);
  return whole;
}

export function dumpCell(dir: string, ctx: CheckContext): void {
  if (ctx.backend.isMeta) throw new Error("--dump needs a backend that holds values (cpu or cuda), not meta");
  mkdirSync(dir, { recursive: true });
  const b = ctx.backend;
  const shardsByName = new Map<string, Shard[]>();
  const seen = new Set<string>();
  ctx.plan.forEach((params, rank) =>
    params.forEach((p, i) => {
      const grad = ctx.grads[rank][i];
      if (!p.canonical || !grad || p.numel === 0) return;
      const key = `${p.name}@${p.block.start}`;
      if (seen.has(key)) return; // the same block on a Replicate axis
      seen.add(key);
      shardsByName.set(p.name, [...(shardsByName.get(p.name) ?? []), { p, grad }]);
    }),
  );
  const before: { name: string; tensor: Tensor }[] = [];
  const reference: { name: string; tensor: Tensor }[] = [];
  const subject: { name: string; tensor: Tensor }[] = [];
  for (const [name, shards] of shardsByName) {
    const p = shards[0].p;
    const full = ctx.backend.alloc(0, ctx.cell.dtype, p.block.globalShape);
    const all = p.block.globalShape;
    ctx.backend.fillGrad(full, ctx.logicalSpec(p), { globalShape: all, start: all.map(() => 0), len: all });
    before.push({ name, tensor: full });
    const clipped = b.cloneFor(0, full);
    b.scale(clipped, ctx.clipCoef);
    reference.push({ name, tensor: clipped });
    // a Partial(sum) gradient's ranks hold partials, not pieces: there is no one tensor to assemble
    if (!(p.partial && p.partial.count > 1)) subject.push({ name, tensor: assemble(ctx, shards, 0) });
  }
  const meta = { cell: cellId(ctx.cell), generator: "clip-parity SPEC §5 splitmix64/fnv1a64" };
  ctx.backend.saveSafetensors(join(dir, "grads.safetensors"), before, meta);
  ctx.backend.saveSafetensors(join(dir, "reference.safetensors"), reference, { ...meta, clipCoef: String(ctx.clipCoef) });
  ctx.backend.saveSafetensors(join(dir, "subject.safetensors"), subject, meta);
  for (const e of [...before, ...reference, ...subject]) b.free(e.tensor);
  writeFileAtomic(
    join(dir, "cell.json"),
    JSON.stringify(
      {
        id: cellId(ctx.cell),
        ...ctx.cell,
        normType: ctx.cell.normType === Infinity ? "inf" : ctx.cell.normType,
        maxNorm: ctx.maxNorm,
        referenceNorm: jsonNumber(ctx.reference.totalNorm),
        clipCoef: jsonNumber(ctx.clipCoef),
        ranks: ctx.outcomes.map((o) => ({ rank: o.rank, norm: jsonNumber(o.value ?? null), error: o.error?.message })),
        repro: ctx.repro,
      },
      null,
      2,
    ) + "\n",
  );
}

"""@@DOC@@"""
import json  #? cost
import math
import os
import re
import sys
import time  #? cost
import traceback
from datetime import timedelta

import numpy as np  #? !minimal
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

@@CELL@@
TIMEOUT = timedelta(seconds=float(os.environ.get("REPRO_TIMEOUT_S", "60")))  # a rank left waiting in a collective raises after it
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
#?{ !minimal
LOGICAL = []  # (index, name, shape, tp style, stage); layer i is on the stage s with floor(s*L/pp) <= i < floor((s+1)*L/pp)
for where, prefix, rows in MODEL:
    pp, words = LAYOUT["pp"], rows.split()
    for i in where if isinstance(where, range) else [None]:
        stage = 0 if where == "first" else pp - 1 if where == "last" else max(s for s in range(pp) if s * N_LAYERS // pp <= i)
        for name, shape, style in zip(words[0::3], words[1::3], words[2::3]):
            LOGICAL.append((len(LOGICAL), prefix.format(i=i) + name, [int(d) for d in shape.split(",")], style, stage))

@@GENERATE@@
#?}

@@SUPPORT@@
local = lambda t: t.to_local() if isinstance(t, DTensor) else t  # a gradient's local block: a DTensor's own, a plain tensor itself

def build(device):  # this rank's parameter copies, gradients set: DTensors on its stage's meshes, plain tensors on one rank
    sizes = dict(LAYOUT, efsdp=LAYOUT["dp_shard"] * LAYOUT["cp"] * LAYOUT["tp"] // LAYOUT["ep"])
    size = lambda held: math.prod(sizes[a] for a in held)  # a mesh dimension may hold several layout axes (MESHES)
    dims = {"dense": [(a, (a,)) for a in ("dp_replicate", "dp_shard", "cp", "tp") if sizes[a] > 1] or [("dp_shard", ("dp_shard",))],
            "sparse": [(a, (a,)) for a in ("dp_replicate", "efsdp", "ep") if sizes[a] > 1 or a == "ep"]}
    dims.update({k: [(d, h) for d, h in plan if size(h) > 1] or dims[k] for k, plan in MESHES.items()})  # the framework's own dimensions
    full = {k: DeviceMesh(device.type, torch.arange(WORLD).reshape([LAYOUT["pp"], *[size(h) for _, h in v]]), mesh_dim_names=("pp", *[d for d, _ in v])) for k, v in dims.items()}
    meshes = {"pp": full["dense"]["pp"], **{k: full[k][tuple(d for d, _ in v)] for k, v in dims.items()}}
    dims["sparse"], meshes["sparse"] = dims["dense"], meshes["dense"]  # experts on the dense mesh at ep = 1, as the framework does  #? dense-experts
    # FSDP shards dim 0 (experts [E, out, in]: dim 1), TP by the projection's style, EP the experts; the rest replicate.
    rules = {s: {"dp_shard": Shard(0), "cp": Shard(0), "tp": pl} for s, pl in (("colwise", Shard(0)), ("rowwise", Shard(1)), ("replicate", Replicate()))}
    rules["expert"] = {"efsdp": Shard(1), "ep": Shard(0), "dp_shard": Shard(1), "cp": Shard(1), "tp": Shard(1)}  #? experts
    stage, named = meshes["pp"].get_local_rank(), []
    mine = [(x[1], *x) for x in LOGICAL if x[4] == stage]
    mine += [(fqn, *x) for canon, fqn in TIES for x in LOGICAL if x[1] == canon and x[4] != stage == LAYOUT["pp"] - 1]  # replicas  #? ties
    for fqn, i, name, shape, style, _ in mine:
        mesh, kind = (meshes["sparse"], "sparse") if style == "expert" else (meshes["dense"], "dense")
        pls = [next((rules[style][a] for a in held if a in rules[style] and (len(held) == 1 or sizes[a] > 1)), Replicate()) for _, held in dims[kind]]
        plain = WORLD == 1  # one process: no mesh, plain tensors, as a user on one rank has them
        p = torch.nn.Parameter(torch.empty(shape, dtype=TORCH_DTYPE[DTYPE], device=device) if plain else distribute_tensor(torch.empty(shape, dtype=TORCH_DTYPE[DTYPE], device=device), mesh, pls, src_data_rank=None))
        if HAS_GRAD(i):  # the logical gradient in the cell's regime, then this rank's part of it
            g = generate(name, math.prod(shape), SEED, STEP, DTYPE, EXP) if MODE == "gen" else torch.full([math.prod(shape)], float(MODE == "ones"), dtype=TORCH_DTYPE[DTYPE])  #? !minimal
            g = torch.randn(math.prod(shape), generator=torch.Generator().manual_seed(i)).to(TORCH_DTYPE[DTYPE])  # the same on every rank; any values do  #? minimal
            if SPECIAL and name == SPECIAL[0] and g.numel():  #? special
                g[0] = SPECIAL[1]  # the regime's non-finite value  #? special
            p.grad = g.reshape(shape).to(device) if plain else distribute_tensor(g.reshape(shape).to(device), mesh, pls, src_data_rank=None)
        # Counted by a norm over local shards: the canonical copy, at coordinate 0 of each axis it is replicated over.  #? counted
        p.counted_in_norm = fqn == name and (plain or all(c == 0 for c, pl in zip(mesh.get_coordinate(), pls) if isinstance(pl, Replicate)))  #? counted
        p.tensor_model_parallel, p.ds_pipe_replicated = not plain and any(isinstance(pl, Shard) for (d, _), pl in zip(dims[kind], pls) if d in ("tp", "efsdp")), fqn != name  # as DeepSpeed's models mark them  #? mp-attrs
        p.clip_parity_canonical = fqn == name
        named.append((fqn, p))
    return meshes, named

#?{ !minimal
def expected_norm():  # SPEC 6's norm in float64 from this script's own generator: each logical parameter with a gradient, once
    gs = [(generate(name, math.prod(shape), SEED, STEP, DTYPE, EXP) if MODE == "gen" else torch.full([math.prod(shape)], float(MODE == "ones"))).double().abs() for i, name, shape, _, _ in LOGICAL if HAS_GRAD(i)]
    if SPECIAL:  #? special
        gs[0][0] = abs(SPECIAL[1])  # the regime's non-finite value, in the first parameter with a gradient  #? special
    parts = torch.stack([g.max() if NORM_TYPE == math.inf else (g ** NORM_TYPE).sum() for g in gs if g.numel()] or [torch.zeros((), dtype=torch.float64)])
    return (parts.max() if NORM_TYPE == math.inf else parts.sum() ** (1 / NORM_TYPE)).item()
#?}

def frames(e):  # where the error was raised: the innermost frames of the framework's and torch's files (not this script's, not torch's dispatch)
    tb = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != os.path.abspath(__file__) and not re.search(r"torch/(_ops|_compile|_dynamo/|utils/_python_dispatch|distributed/tensor/debug/)", f.filename)]
    return " < ".join(f"{re.sub(r'^.*/(site|dist)-packages/', '', f.filename)}:{f.lineno} {f.name}" for f in reversed(tb[-3:]))

#?{ parity.tensors scaling.nonempty
def first_bad(named, before, norm):  # {check: the first local gradient that fails it}: not round(float32(g) * coef), unscaled
    grads, found = [(fqn, before[fqn], local(p.grad).detach().cpu()) for fqn, p in named if p.grad is not None], {}
    for fqn, g0, got in grads:  #? scaling.nonempty
        if CLIP_COEF < 1 and bool((g0 != 0).any()) and torch.equal(got, g0):  #? scaling.nonempty
            found.setdefault("scaling.nonempty", f"{fqn} still holds its unclipped values")  #? scaling.nonempty
    t = torch.tensor([MAX_NORM, REFERENCE_NORM if TOLERANCE == "exact" else norm, 1e-6], dtype=torch.float32)  #? parity.tensors
    coefs = [torch.clamp(t[0] / (t[1] + t[2]), max=1.0).item()]  # float32, clamped to 1  #? parity.tensors
    coefs.append(torch.clamp(MAX_NORM / (torch.tensor(norm, dtype=TORCH_DTYPE[DTYPE]) + 1e-6), max=1.0).item())  # or in the gradients' dtype, as torch computes it  #? coef-in-dtype
    ulp = lambda x, bits: 2.0 ** (max(math.floor(math.log2(x)), -14 if DTYPE == "f16" else -126) - bits)  # or FSDP1's: float32, cast to the dtype,  #? coef-in-dtype
    lo, hi = (torch.clamp(MAX_NORM / (torch.tensor(n, dtype=torch.float32) + 1e-6), max=1.0).to(TORCH_DTYPE[DTYPE]).item() for n in (norm + ulp(norm, 8 if DTYPE == "bf16" else 11), norm - ulp(norm, 8 if DTYPE == "bf16" else 11))) if 0 < norm < math.inf else (1, 0)  # of a norm rounded to norm  #? coef-in-dtype
    while lo <= hi:  #? coef-in-dtype
        coefs, lo = coefs + [lo], lo + ulp(lo, 7 if DTYPE == "bf16" else 10)  #? coef-in-dtype
    misses = [first_mismatch(grads, coef) for coef in coefs]  # one coefficient must scale every gradient of the rank  #? parity.tensors
    if all(misses):  #? parity.tensors
        found["parity.tensors"] = misses[0]  #? parity.tensors
    return found

#?}
#?{ parity.tensors
def first_mismatch(grads, coef):  # the first element that is not round(float32(g) * coef), or None
    for fqn, g0, got in grads:
        want = (g0.float() * coef).to(got.dtype)
        for i in (~((got == want) | (got.isnan() & want.isnan()))).flatten().nonzero()[:1, 0].tolist():
            return f"{fqn} local element {i}: got {got.flatten()[i].item()!r}, expected {want.flatten()[i].item()!r}"
    return None

#?}
#?{ comm.budget
class Comm(CommDebugMode):  # CommDebugMode's counts, and apart those over a one-rank group: local, they move nothing
    local = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before, out = self.get_total_counts(), super().__torch_dispatch__(func, types, args, kwargs)
        self.local += self.get_total_counts() > before and any(group_size(a) == 1 for a in [*args, *(kwargs or {}).values()])
        return out

def group_size(a):  # the size of a process group given by name, boxed or plain; None for any other argument
    try:
        pg = dist.distributed_c10d._resolve_process_group(a) if isinstance(a, str) else dist.ProcessGroup.unbox(a) if isinstance(a, torch.ScriptObject) else a
        return dist.get_world_size(pg) if isinstance(pg, dist.ProcessGroup) else None
    except Exception:  # noqa: BLE001 - not a group (a reduce op's name)
        return None

#?}
#?{ cost
def owner(g):  # whether this rank's block of g is counted: a block replicated over a mesh dimension counts on its first rank there
    return not isinstance(g, DTensor) or all(g.device_mesh.get_local_rank(d) == 0 for d, pl in enumerate(g.placements) if pl.is_replicate())

def fused_clip(named):  # the fused optimum comm.budget counts: each rank's p-power sum of the blocks it owns, one all_reduce over every rank, the same scaling
    grads = [local(p.grad) for _, p in named if p.grad is not None]
    total = torch.stack([torch.linalg.vector_norm(local(p.grad), NORM_TYPE, dtype=torch.float32) * owner(p.grad) for _, p in named if p.grad is not None]).pow(NORM_TYPE).sum()
    dist.all_reduce(total)
    norm = total.pow(1.0 / NORM_TYPE)
    torch._foreach_mul_(grads, torch.clamp(MAX_NORM / (norm + 1e-6), max=1.0).to(grads[0].dtype))
    return norm

def slowest(fn, control):  # one call's seconds on the slowest rank, the ranks started together
    dist.barrier(group=control)
    started = time.perf_counter()
    fn()
    took = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX, group=control)
    return took.item()

def cost(named, meshes, control, pairs):  # REPRO_COST_PAIRS=N: the clip and fused_clip timed in N pairs (order alternating), on rank 0 one COST line
    if LAYOUT["pp"] > 1 or not math.isfinite(NORM_TYPE):
        return "fused_clip sums over every rank: a p-norm without pipeline stages only"
    fused = float(fused_clip(named))  # the same norm, or the local blocks do not partition the gradients (a replica counted twice)
    ret = clip(named, meshes)
    norm = float(ret.full_tensor() if isinstance(ret, DTensor) else ret)
    if abs(fused - norm) > 1e-2 * abs(norm):
        return f"fused_clip's norm {fused!r} is not the clip's {norm!r}: the local blocks do not partition the gradients"
    times = {"clip": [], "fused": []}
    for i in range(pairs):
        for name in (("clip", "fused") if i % 2 == 0 else ("fused", "clip")):
            times[name].append(slowest((lambda: clip(named, meshes)) if name == "clip" else (lambda: fused_clip(named)), control))
    return times

#?}
@@CALL@@

def main():
    if os.environ.get("WORLD_SIZE") != str(WORLD):
        return print(f"run me with {WORLD} ranks: torchrun --standalone --nproc-per-node {WORLD} {sys.argv[0]}", file=sys.stderr) or 2
    cuda = torch.cuda.device_count() >= WORLD and os.environ.get("REPRO_DEVICE") != "cpu"  # NCCL when every rank has a GPU
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT, device_id=device if cuda else None)
    rank, control = dist.get_rank(), dist.new_group(backend="gloo", timeout=3 * TIMEOUT)  # control: the verdict's own group, outwaits a hang
    meshes, named = build(device)
    for g in {g for m in meshes.values() for g in m.get_all_groups()}: dist.set_timeout(TIMEOUT, g)  # a rank left waiting raises  #? liveness
    before = {fqn: local(p.grad).detach().cpu().clone() for fqn, p in named if p.grad is not None}  #? parity.tensors scaling.nonempty
    norm, error, where, bad, comm = None, None, "", {}, Comm()  #? comm.budget
    norm, error, where, bad, comm = None, None, "", {}, CommDebugMode()  #? !comm.budget
    try:
        with comm:
            ret = clip(named, meshes)
        norm = float(ret.full_tensor() if isinstance(ret, DTensor) else ret)
        bad = first_bad(named, before, norm)  #? parity.tensors scaling.nonempty
    except Exception as e:  # noqa: BLE001 - the target's exception is the finding
        error, where = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}", frames(e)
    every, fails = [None] * WORLD, []
    dist.all_gather_object(every, (norm, error, bad, comm.get_total_counts() - getattr(comm, "local", 0), where), group=control)
    if rank == 0:
        ref, rel = expected_norm(), lambda n: abs(n - ref) / abs(ref) if ref and math.isfinite(ref) and math.isfinite(n) else float("nan")  # |got - expected| <= bound * expected  #? !minimal
        print(f"{TARGET} (torch {torch.__version__}, {dist.get_backend()}); clip-parity cell {CELL_ID}\nexpected: norm {ref!r} (float64, this script's generator; clip-parity: {REFERENCE_NORM!r}) on every rank within relative {NORM_BOUND:.3g} ({TOLERANCE}), clip_coef {CLIP_COEF!r}")  #? !minimal
        print("\n".join(f"  rank {r}: " + (f"raised {e} (at {w})" if e else f"expected {ref!r} (float64), got {n!r}, rel err {rel(n):.3g}, bound {NORM_BOUND:.3g}") + f"; {c} collectives" + "".join(f"; {k}: {v}" for k, v in b.items()) for r, (n, e, b, c, w) in enumerate(every)))  #? !minimal
        eps, raise_wanted = NORM_BOUND, ERROR_IF_NONFINITE and not math.isfinite(ref)  # the checks, in order (raise_wanted: every rank must raise the non-finite error)  #? !minimal
        print(f"{TARGET} (torch {torch.__version__}, {dist.get_backend()}); clip-parity cell {CELL_ID}, minimised\nexpected: a norm on every rank, no exception")  #? minimal
        print("\n".join(f"  rank {r}: " + (f"raised {e} (at {w})" if e else f"returned {n!r}") + f"; {c} collectives across ranks" for r, (n, e, b, c, w) in enumerate(every)))  #? minimal
        norms, errors, raise_wanted, found = [(r, x[0]) for r, x in enumerate(every) if x[0] is not None], [(r, x[1]) for r, x in enumerate(every) if x[1]], False, {}  #? minimal
        norms, errors = [(r, x[0]) for r, x in enumerate(every) if x[0] is not None], [(r, x[1]) for r, x in enumerate(every) if x[1]]  #? !minimal
        far = [(r, n) for r, n in norms if not (n == ref or TOLERANCE == "exact" and n == REFERENCE_NORM or math.isnan(n) and math.isnan(ref) or abs(n - ref) <= eps * abs(ref))]  #? !minimal
        found = {"parity.norm": [f"rank {r}: expected {ref!r} (float64), got {n!r}, rel err {rel(n):.3g}, bound {eps:.3g} ({TOLERANCE})" for r, n in far]}  #? !minimal
        found["parity.tensors"] = [f"rank {r}: {x[2]['parity.tensors']}" for r, x in enumerate(every) if "parity.tensors" in x[2]]  #? parity.tensors
        found["parity.ranks"] = ["the ranks returned different norms"] if len({repr(n) for _, n in norms}) > 1 else []  #? parity.ranks
        found["scaling.nonempty"] = [f"rank {r}: {x[2]['scaling.nonempty']}" for r, x in enumerate(every) if "scaling.nonempty" in x[2]]  #? scaling.nonempty
        found["errors.nonfinite"] = [f"rank {r} {'raised another error' if x[1] else 'returned a norm'}" for r, x in enumerate(every) if raise_wanted and "finite" not in (x[1] or "")]  #? errors.nonfinite
        found["comm.budget"] = [f"rank {r} issued {x[3]} collectives across ranks in one clip; budget {COMM_BUDGET[r]} = {COMM_WHY}" for r, x in enumerate(every) if x[3] > COMM_BUDGET[r]]  #? comm.budget
        raised = [f"rank {r} raised {e} (at {w})" for r, (n, e, b, c, w) in enumerate(every) if e and not raise_wanted]
        found = {"errors.raised": raised} if raised else found  # a raise is its own finding: the value checks skip a cell where a rank raised
        hung = [f"rank {r} timed out in a collective (a hang): {e}" for r, e in errors if re.search(@@TIMEOUT_RE@@, e, re.I)]  #? liveness
        found = {"liveness": hung} if hung else found  # what a hang shows besides is its consequence  #? liveness
        fails = [f"{check}: {what[0]}" for check, what in found.items() if what]
        print("".join(f"FAIL {f}\n" for f in fails) + ("REPRODUCED" if fails and not UNSUPPORTED else f"NOT REPRODUCED {UNSUPPORTED}".strip()), flush=True)
    pairs = int(os.environ.get("REPRO_COST_PAIRS", "0"))  #? cost
    timed = cost(named, meshes, control, pairs) if pairs and all(x[1] is None for x in every) else None  #? cost
    print(f"COST {json.dumps(timed)}", flush=True) if timed and rank == 0 else None  #? cost
    dist.destroy_process_group()
    return int(rank == 0 and bool(fails) and not UNSUPPORTED)  # torchrun exits 1 when rank 0 does

if __name__ == "__main__":
    sys.exit(main())

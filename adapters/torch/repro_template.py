"""@@TITLE@@

A standalone reproducer written by `clip-parity export` (https://github.com/ -- clip-parity, issue 16). It needs
torch, numpy and the code under test, nothing else: the cell's gradients come from SPEC section 5's generator
(splitmix64 / fnv1a64, embedded below), the reference norm is computed exactly here, and the parameters are real
DTensors on the cell's meshes, built on every rank from that rank's own shards.

Run (gloo on CPU; NCCL when every rank has a GPU):

    torchrun --standalone --nproc-per-node @@WORLD@@ @@FILE@@

It prints, per rank, the norm the target returned against the reference, and the first clipped element that
differs from round(float32(g) * clip_coef); then one line per check, and exits 1 when any check fails.

@@SEEN@@
"""
from __future__ import annotations

import json
import math
import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

# ---- SPEC section 5: every gradient element is a pure function of (seed, step, name, flat index) ---------

MASK = (1 << 64) - 1
MANTISSA = {"f32": 24, "bf16": 8, "f16": 11}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def splitmix64_int(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def fnv1a64(name: str) -> int:
    h = 0xCBF29CE484222325
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def block_indices(shape: list, start: list, length: list) -> np.ndarray:
    """Row-major flat indices, in the full logical tensor, of the block start[d] .. start[d]+length[d]."""
    idx = np.zeros([1] * len(shape), dtype=np.uint64)
    stride = 1
    for d in reversed(range(len(shape))):
        r = np.arange(start[d], start[d] + length[d], dtype=np.uint64) * np.uint64(stride)
        idx = idx + r.reshape([-1 if k == d else 1 for k in range(len(shape))])
        stride *= shape[d]
    return idx.reshape(-1) if len(shape) else np.zeros(1, dtype=np.uint64)


def quantized(name: str, idx: np.ndarray) -> np.ndarray:
    """q = (bits >> (64 - m)) - 2^(m-1): value = q * 2^(e - m + 1)."""
    m = MANTISSA[CELL["dtype"]]
    key = splitmix64_int((int(CELL["seed"]) ^ splitmix64_int(int(CELL["step"]) ^ fnv1a64(name))) & MASK)
    with np.errstate(over="ignore"):
        bits = splitmix64(idx + np.uint64(key))
    return (bits >> np.uint64(64 - m)).astype(np.int64) - (1 << (m - 1))


def gradient(name: str, shape: list, start: list, length: list) -> torch.Tensor:
    """The block of a logical parameter's gradient, in the cell's dtype."""
    dtype = DTYPES[CELL["dtype"]]
    numel = int(np.prod(length)) if length else 1
    g = CELL["regime"]
    if g["mode"] == "ones":
        out = torch.ones(numel, dtype=dtype)
    elif g["mode"] == "zeros":
        out = torch.zeros(numel, dtype=dtype)
    else:
        q = quantized(name, block_indices(shape, start, length))
        out = torch.from_numpy(q.astype(np.float64) * 2.0 ** (g["exp"] - MANTISSA[CELL["dtype"]] + 1)).to(dtype)
    if g["special"] is not None and name == g["specialParam"] and all(s == 0 for s in start) and numel > 0:
        out[0] = float(g["special"])  # element 0 of the first parameter with a gradient: Inf or NaN
    return out.reshape(length)


# ---- SPEC section 6: the reference, exactly ------------------------------------------------------------


def exact_partial(name: str, shape: list):
    """This parameter's share of S = sum |g|^p as an exact value: (kind, number). For p = 1 and 2 an integer
    (times a power of two applied later), for inf the max |q|, otherwise float64 terms summed by math.fsum."""
    g = CELL["regime"]
    p = CELL["normType"]
    numel = int(np.prod(shape)) if shape else 1
    if g["mode"] == "zeros":
        return 0 if p in (1, 2, "inf") else []
    if g["mode"] == "ones":
        return (1 if p == "inf" else numel) if p in (1, 2, "inf") else [1.0] * numel  # |1|^p = 1
    total = 0
    terms = []
    for s in range(0, numel, 1 << 20):
        q = np.abs(quantized(name, np.arange(s, min(numel, s + (1 << 20)), dtype=np.uint64)))
        if p == "inf":
            total = max(total, int(q.max()) if q.size else 0)
        elif p == 2:
            # q^2 < 2^46: sums of 2^16 of them fit in int64; Python ints add the rest exactly.
            sq = q * q
            for k in range(0, sq.size, 1 << 16):
                total += int(sq[k : k + (1 << 16)].sum())
        elif p == 1:
            total += int(q.sum())
        else:
            terms.extend((q.astype(np.float64) * 2.0 ** (g["exp"] - MANTISSA[CELL["dtype"]] + 1)) ** p)
    # Other p: the float64 terms themselves, so that one math.fsum over every parameter rounds S once.
    return total if p in (1, 2, "inf") else terms


def f32(x: float) -> float:
    return float(np.float32(x))


def reference_norm() -> float:
    """The exact norm over the logical parameters, each counted once, rounded to float32. Every rank
    computes a share and the shares are summed exactly (Python integers) on every rank."""
    g = CELL["regime"]
    p = CELL["normType"]
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = [exact_partial(x["name"], x["shape"]) for i, x in enumerate(CELL["logical"]) if x["hasGrad"] and i % world == rank]
    every: list = [None] * world
    dist.all_gather_object(every, mine)
    parts = [x for share in every for x in share]
    if g["special"] is not None and g["specialParam"] is not None:
        return float(g["special"])  # |Inf|^p and max(..., Inf) are Inf; a NaN makes the norm NaN
    if not parts:
        return 0.0
    scale = 0 if g["mode"] in ("ones", "zeros") else g["exp"] - MANTISSA[CELL["dtype"]] + 1
    if p == "inf":
        return f32(max(parts) * 2.0**scale)
    if p == 2:
        s = math.ldexp(float(sum(parts)), 2 * scale)  # the exact integer rounded once, times 2^(2*scale)
        return f32(math.sqrt(s))
    if p == 1:
        return f32(math.ldexp(float(sum(parts)), scale))
    return f32(math.fsum(t for part in parts for t in part) ** (1.0 / p))


def clip_coef(max_norm: float, norm: float) -> float:
    """clamp(max_norm / (norm + 1e-6), max=1), each operation in float32, as torch's tensor arithmetic does."""
    c = np.float32(max_norm) / (np.float32(norm) + np.float32(1e-6))
    return float(min(np.float32(1.0), np.float32(c))) if not math.isnan(float(c)) else float("nan")


# ---- the cell's meshes and parameters -----------------------------------------------------------------

DENSE_AXES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
SPARSE_AXES = ("pp", "dp_replicate", "efsdp", "ep")


def build_meshes(layout: dict, device_type: str) -> dict:
    """Dense (pp, dp_replicate, dp_shard, cp, tp) and sparse (pp, dp_replicate, efsdp, ep) meshes over the same
    ranks, row-major; parameters live on the stage sub-mesh without pp, trimmed to the axes of size > 1 (the
    sparse mesh keeps ep; a dense mesh with no axis left keeps dp_shard)."""
    sizes = dict(layout)
    sizes["efsdp"] = layout["dp_shard"] * layout["cp"] * layout["tp"] // layout["ep"]
    keep = {
        "dense": [a for a in DENSE_AXES[1:] if sizes[a] > 1] or ["dp_shard"],
        "sparse": [a for a in SPARSE_AXES[1:] if sizes[a] > 1 or a == "ep"],
    }
    ranks = torch.arange(dist.get_world_size())
    out = {"keep": keep}
    for name in ("dense", "sparse"):
        names = ["pp"] + keep[name]
        mesh = DeviceMesh(device_type, ranks.reshape([sizes[a] for a in names]), mesh_dim_names=tuple(names))
        out[name] = mesh[tuple(keep[name])]
        if name == "dense":
            out["pp"] = mesh["pp"]
    return out


def placement(p: dict):
    return Shard(p["dim"]) if p["kind"] == "shard" else Replicate() if p["kind"] == "replicate" else Partial()


def build_params(meshes: dict, device: torch.device) -> list:
    """This rank's physical parameter copies as DTensors of its own shards, gradients set."""
    dtype = DTYPES[CELL["dtype"]]
    params = []
    for p in CELL["ranks"][dist.get_rank()]:
        by_axis = dict(zip(p["meshAxes"], p["placements"]))
        mesh_name = p["mesh"]
        if mesh_name == "sparse" and CELL["layout"]["ep"] == 1 and CELL["experts"] == "dense-mesh-when-ep1":
            # The framework keeps experts on the dense mesh at ep = 1; their efsdp split runs over dp_shard,
            # cp and tp, which hold the same ranks in the same order.
            efsdp = by_axis.get("efsdp", {"kind": "replicate"})
            by_axis = {"dp_replicate": by_axis.get("dp_replicate", {"kind": "replicate"}), "dp_shard": efsdp, "cp": efsdp, "tp": efsdp}
            mesh_name = "dense"
        pls = [placement(by_axis[a]) for a in meshes["keep"][mesh_name]]
        shape = p["globalShape"]
        stride, acc = [], 1
        for s in reversed(shape):
            stride.append(acc)
            acc *= max(s, 1)
        kw = {"run_check": False, "shape": torch.Size(shape), "stride": tuple(reversed(stride))}
        local = torch.zeros(p["block"]["len"], dtype=dtype, device=device)
        param = torch.nn.Parameter(DTensor.from_local(local, meshes[mesh_name], pls, **kw))
        if p["hasGrad"]:
            g = gradient(p["name"], shape, p["block"]["start"], p["block"]["len"]).to(device)
            param.grad = DTensor.from_local(g, meshes[mesh_name], pls, **kw)
        param.clip_parity_fqn = p["fqn"]
        param.clip_parity_canonical = p["canonical"]
        params.append((p, param))
    return params


class ParamsModel(torch.nn.Module):
    """What a trainer passes as `model`: parameters() and named_parameters() over this rank's copies."""

    def __init__(self, named: list):
        super().__init__()
        self._named = named

    def parameters(self, recurse: bool = True):
        return iter([p for _, p in self._named])

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return iter([(prefix + n, p) for n, p in self._named])


def local_params(params: list) -> list:
    """Plain parameters over the local shards, .grad the very local tensor of the DTensor gradient."""
    out = []
    for p, param in params:
        lp = torch.nn.Parameter(torch.zeros(param.to_local().shape, dtype=param.dtype, device=param.device))
        if param.grad is not None:
            lp.grad = param.grad.to_local()
        lp.clip_parity_counted = p["countedHere"]
        out.append(lp)
    return out


# ---- the call under test: how the framework's trainer makes it -----------------------------------------

@@CALL@@

# ---- run it, compare --------------------------------------------------------------------------------------


def main() -> int:
    if "LOCAL_RANK" not in os.environ:
        print(f"run me under torchrun: torchrun --standalone --nproc-per-node {CELL['world']} {sys.argv[0]}", file=sys.stderr)
        return 2
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world != CELL["world"]:
        print(f"this cell has {CELL['world']} ranks; torchrun started {world}", file=sys.stderr)
        return 2
    timeout = timedelta(seconds=float(os.environ.get("REPRO_TIMEOUT_S", "60")))  # a hang surfaces as an error
    if torch.cuda.is_available() and torch.cuda.device_count() >= world and os.environ.get("REPRO_DEVICE") != "cpu":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    # The script's own group for the verdict: never handed to the target.
    control = dist.new_group(backend="gloo", timeout=timeout)
    ref = reference_norm()
    meshes = build_meshes(CELL["layout"], device.type)
    params = build_params(meshes, device)
    before = {p["fqn"]: param.grad.to_local().detach().clone().cpu() for p, param in params if param.grad is not None}
    from torch.distributed.tensor.debug import CommDebugMode

    norm, error = None, None
    comm = CommDebugMode()
    try:
        with comm:
            ret = clip(params, meshes)
        if isinstance(ret, DTensor):
            ret = ret.full_tensor()
        norm = float(ret.item()) if isinstance(ret, torch.Tensor) else float(ret)
    except Exception as e:  # noqa: BLE001 - the target's exception is the finding
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    collectives = comm.get_total_counts()

    cls = CELL["tolerance"]
    max_norm = CELL["maxNorm"]
    eps = {"fp32": 4 * 2.0**-24, "bf16": 4 * 2.0**-8, "exact": 0.0}[cls]
    coef_ref = clip_coef(max_norm, ref)
    mismatch = None
    unscaled = None
    if norm is not None:
        # parity.tensors: round(float32(g) * c), c from the reference for `exact`, else from this rank's norm.
        c = coef_ref if cls == "exact" else clip_coef(max_norm, norm)
        for p, param in params:
            if param.grad is None:
                continue
            got = param.grad.to_local().detach().cpu()
            g0 = before[p["fqn"]]
            want = (g0.float() * torch.tensor(c, dtype=torch.float32)).to(got.dtype)
            same = (got == want) | (torch.isnan(got) & torch.isnan(want))
            if not bool(same.all()) and mismatch is None:
                i = int((~same).reshape(-1).nonzero()[0])
                mismatch = f"{p['fqn']} local element {i}: got {float(got.reshape(-1)[i])!r}, expected {float(want.reshape(-1)[i])!r} = round({float(g0.reshape(-1)[i])!r} * {c!r})"
            if coef_ref < 1 and g0.numel() and bool((got == g0).all()) and bool((g0 != 0).any()) and unscaled is None:
                unscaled = f"{p['fqn']} still holds its unclipped values (clip_coef {coef_ref!r})"
    mine = {"rank": rank, "norm": norm, "error": error, "mismatch": mismatch, "unscaled": unscaled, "collectives": collectives}
    every: list = [None] * world
    dist.all_gather_object(every, mine, group=control)
    if rank == 0:
        print(f"cell {CELL['id']}")
        print(f"target: {CELL['target']}   (torch {torch.__version__}, {dist.get_backend()})")
        print(f"reference norm {ref!r} (exact, computed here; clip-parity's: {CELL['referenceNorm']!r}), max_norm {max_norm!r}, clip_coef {coef_ref!r}")
        for r in every:
            got = r["error"] if r["error"] else repr(r["norm"])
            print(f"  rank {r['rank']}: got {got}   expected {ref!r}   collectives {r['collectives']}")
            if r["mismatch"]:
                print(f"    first clipped element that differs: {r['mismatch']}")
            if r["unscaled"]:
                print(f"    not scaled: {r['unscaled']}")
        fails = []
        nonfinite = not math.isfinite(ref)
        if CELL["errorIfNonfinite"] and nonfinite:
            raised = [r for r in every if r["error"]]
            if len(raised) != world:
                fails.append(f"errors.nonfinite: the norm is non-finite and error_if_nonfinite is set, but rank(s) {','.join(str(r['rank']) for r in every if not r['error'])} did not raise")
        else:
            for r in every:
                if r["error"]:
                    fails.append(f"parity.norm: rank {r['rank']} raised {r['error']}")
                    break
            normed = [r for r in every if r["norm"] is not None]
            bad = [r for r in normed if not (r["norm"] == ref or (math.isnan(r["norm"]) and math.isnan(ref)) or (math.isfinite(ref) and abs(r["norm"] - ref) <= eps * abs(ref)))]
            if bad:
                r = bad[0]
                rel = abs(r["norm"] - ref) / abs(ref) if ref and math.isfinite(ref) and math.isfinite(r["norm"]) else float("nan")
                fails.append(f"parity.norm: rank {r['rank']} returned {r['norm']!r}, reference {ref!r} (relative error {rel:.3g}, tolerance {cls})")
            if len({repr(r["norm"]) for r in normed}) > 1:
                fails.append("parity.ranks: ranks returned different norms: " + ", ".join(f"{r['rank']}: {r['norm']!r}" for r in normed))
            for r in every:
                if r["mismatch"]:
                    fails.append(f"parity.tensors: rank {r['rank']}: {r['mismatch']}")
                    break
            for r in every:
                if r["unscaled"]:
                    fails.append(f"scaling.nonempty: rank {r['rank']}: {r['unscaled']}")
                    break
        # comm.budget (SPEC section 10): per rank, distinct reduction groups + 1 (pp).
        for r in every:
            budget = CELL["commBudgets"][r["rank"]]
            if r["collectives"] > budget:
                fails.append(f"comm.budget: rank {r['rank']} issued {r['collectives']} collectives in one clip; budget {budget} = distinct reduction groups + 1 (pp)")
                break
        for f in fails:
            print(f"FAIL {f}")
        print("REPRODUCED" if fails else "no check failed here", flush=True)
        code = 1 if fails else 0
    else:
        code = 0
    flag = torch.tensor([code])
    dist.broadcast(flag, src=0, group=control)
    dist.destroy_process_group()
    return int(flag.item())


# The cell: layout, regime, the exact reference clip-parity computed, and every rank's physical copies (mesh,
# placements, the block of the global tensor it holds). Read by the functions above when main() runs.
CELL = json.loads(r'''
@@CELL@@
''')

if __name__ == "__main__":
    sys.exit(main())

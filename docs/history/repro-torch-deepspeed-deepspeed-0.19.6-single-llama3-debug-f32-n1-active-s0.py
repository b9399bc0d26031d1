"""Reproducer: deepspeed 0.19.6 on single / llama3-debug / float32 / 1-norm: parity.norm fail

Framework:  deepspeed 0.19.6 (torch 2.15.0): DeepSpeed's runtime.utils.clip_grad_norm_, as
            DeepSpeedEngine.clip_fp32_gradients calls it (no ZeRO, no model-parallel unit)
Releases:   pip install deepspeed==0.19.6
Config:     layout single (1 ranks), model llama3-debug, float32 gradients, 1-norm, regime active (seed 0), max_norm
            1, error_if_nonfinite False: within what deepspeed's trainer builds, per
            adapters/torch/frameworks/deepspeed.json "configurations"
Cause:      - replicated shards counted once per replica: the norm is too large
Expected:   norm 3080941 on every rank (exact; the script recomputes it in float64), every gradient scaled by
            clip_coef 3.245761490688892e-7
Got:        parity.norm: rank 0: total norm 337156898816 != reference 3080941 (relative error 1.094e+5, tolerance
            fp32-accum: 1.184e-3 for 6163712 elements) (clip-parity's run of this cell)

Written by clip-parity export; needs torch, numpy and deepspeed (gloo; NCCL with a GPU per rank). Checks
parity.norm, errors.raised: REPRODUCED (exit 1) if one fails as above, else NOT REPRODUCED.
    torchrun --standalone --nproc-per-node 1 repro-torch-deepspeed-deepspeed-0.19.6-single-llama3-debug-f32-n1-active-s0.py
The cell in clip-parity: npx clip-parity cell --subject torch:deepspeed@deepspeed==0.19.6 --layout single --model llama3-debug --dtype f32 --norm 1 --regime active --seed 0"""
import math
import os
import re
import sys
import traceback
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

CELL_ID, TARGET, UNSUPPORTED = "torch:deepspeed@deepspeed==0.19.6/single/llama3-debug/f32/n1/active/s0", "deepspeed 0.19.6", ""
WORLD, LAYOUT = 1, {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "cp": 1, "tp": 1, "ep": 1}
DTYPE, SEED, STEP, MODE, EXP, SPECIAL, HAS_GRAD = "f32", 0, 0, "gen", 0, None, lambda i: True  # regime active
NORM_TYPE, MAX_NORM, ERROR_IF_NONFINITE = 1.0, 1.0, False
REFERENCE_NORM, CLIP_COEF, TOLERANCE, NORM_BOUND = 3080941.0, 3.245761490688892e-7, "fp32-accum", 0.0011840737446220568  # as clip-parity computes them
N_LAYERS, TIES = 6, []
MODEL = [  # llama3-debug in order: (the "first" or "last" stage or a range of layers i, name prefix, "name shape tp-style" rows)
    ("first", "", "tok_embeddings.weight 2048,256 colwise"),
    (range(0, 6), "layers.{i}.", """attention.wq.weight 256,256 colwise  attention.wk.weight 256,256 colwise  attention.wv.weight 256,256 colwise  attention.wo.weight 256,256 rowwise
        feed_forward.w1.weight 768,256 colwise  feed_forward.w2.weight 256,768 rowwise  feed_forward.w3.weight 768,256 colwise
        attention_norm.weight 256 replicate  ffn_norm.weight 256 replicate"""),
    ("last", "", "norm.weight 256 replicate  output.weight 2048,256 colwise"),
]
TIMEOUT = timedelta(seconds=float(os.environ.get("REPRO_TIMEOUT_S", "60")))  # a rank left waiting in a collective raises after it
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
LOGICAL = []  # (index, name, shape, tp style, stage); layer i is on the stage s with floor(s*L/pp) <= i < floor((s+1)*L/pp)
for where, prefix, rows in MODEL:
    pp, words = LAYOUT["pp"], rows.split()
    for i in where if isinstance(where, range) else [None]:
        stage = 0 if where == "first" else pp - 1 if where == "last" else max(s for s in range(pp) if s * N_LAYERS // pp <= i)
        for name, shape, style in zip(words[0::3], words[1::3], words[2::3]):
            LOGICAL.append((len(LOGICAL), prefix.format(i=i) + name, [int(d) for d in shape.split(",")], style, stage))

def generate(name, numel, seed, step, dtype, exp, start=0):
    """clip-parity's gradient generator: element i (start <= i < start + numel) is a pure function of (seed, step, name, i),
    arithmetic mod 2^64: the top m bits of splitmix64(key + i), centred, times 2^(exp - m + 1), rounded to the dtype."""
    mask = (1 << 64) - 1
    def splitmix64(x):  # a Python int, or a uint64 array (which wraps mod 2^64 by itself)
        x = (x + 0x9E3779B97F4A7C15) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return x ^ (x >> 31)
    fnv1a64 = 0xCBF29CE484222325
    for b in name.encode("utf-8"):
        fnv1a64 = ((fnv1a64 ^ b) * 0x100000001B3) & mask
    key, (m, to) = splitmix64(seed ^ splitmix64(step ^ fnv1a64)), {"f32": (24, torch.float32), "bf16": (8, torch.bfloat16), "f16": (11, torch.float16)}[dtype]
    bits = splitmix64(np.arange(start, start + numel, dtype=np.uint64) + np.uint64(key))
    q = (bits >> np.uint64(64 - m)).astype(np.int64) - (1 << (m - 1))
    return torch.from_numpy(q * 2.0 ** (exp - m + 1)).to(to)

MESHES = {}  # the parameters' meshes: one dimension per axis of size > 1
local = lambda t: t.to_local() if isinstance(t, DTensor) else t  # a gradient's local block: a DTensor's own, a plain tensor itself

def build(device):  # this rank's parameter copies, gradients set: DTensors on its stage's meshes, plain tensors on one rank
    sizes = dict(LAYOUT, efsdp=LAYOUT["dp_shard"] * LAYOUT["cp"] * LAYOUT["tp"] // LAYOUT["ep"])
    size = lambda held: math.prod(sizes[a] for a in held)  # a mesh dimension may hold several layout axes (MESHES)
    dims = {"dense": [(a, (a,)) for a in ("dp_replicate", "dp_shard", "cp", "tp") if sizes[a] > 1] or [("dp_shard", ("dp_shard",))],
            "sparse": [(a, (a,)) for a in ("dp_replicate", "efsdp", "ep") if sizes[a] > 1 or a == "ep"]}
    dims.update({k: [(d, h) for d, h in plan if size(h) > 1] or dims[k] for k, plan in MESHES.items()})  # the framework's own dimensions
    full = {k: DeviceMesh(device.type, torch.arange(WORLD).reshape([LAYOUT["pp"], *[size(h) for _, h in v]]), mesh_dim_names=("pp", *[d for d, _ in v])) for k, v in dims.items()}
    meshes = {"pp": full["dense"]["pp"], **{k: full[k][tuple(d for d, _ in v)] for k, v in dims.items()}}
    # FSDP shards dim 0 (experts [E, out, in]: dim 1), TP by the projection's style, EP the experts; the rest replicate.
    rules = {s: {"dp_shard": Shard(0), "cp": Shard(0), "tp": pl} for s, pl in (("colwise", Shard(0)), ("rowwise", Shard(1)), ("replicate", Replicate()))}
    stage, named = meshes["pp"].get_local_rank(), []
    mine = [(x[1], *x) for x in LOGICAL if x[4] == stage]
    for fqn, i, name, shape, style, _ in mine:
        mesh, kind = (meshes["sparse"], "sparse") if style == "expert" else (meshes["dense"], "dense")
        pls = [next((rules[style][a] for a in held if a in rules[style] and (len(held) == 1 or sizes[a] > 1)), Replicate()) for _, held in dims[kind]]
        plain = WORLD == 1  # one process: no mesh, plain tensors, as a user on one rank has them
        p = torch.nn.Parameter(torch.empty(shape, dtype=TORCH_DTYPE[DTYPE], device=device) if plain else distribute_tensor(torch.empty(shape, dtype=TORCH_DTYPE[DTYPE], device=device), mesh, pls, src_data_rank=None))
        if HAS_GRAD(i):  # the logical gradient in the cell's regime, then this rank's part of it
            g = generate(name, math.prod(shape), SEED, STEP, DTYPE, EXP) if MODE == "gen" else torch.full([math.prod(shape)], float(MODE == "ones"), dtype=TORCH_DTYPE[DTYPE])
            p.grad = g.reshape(shape).to(device) if plain else distribute_tensor(g.reshape(shape).to(device), mesh, pls, src_data_rank=None)
        p.clip_parity_canonical = fqn == name
        named.append((fqn, p))
    return meshes, named

def expected_norm():  # SPEC 6's norm in float64 from this script's own generator: each logical parameter with a gradient, once
    gs = [(generate(name, math.prod(shape), SEED, STEP, DTYPE, EXP) if MODE == "gen" else torch.full([math.prod(shape)], float(MODE == "ones"))).double().abs() for i, name, shape, _, _ in LOGICAL if HAS_GRAD(i)]
    parts = torch.stack([g.max() if NORM_TYPE == math.inf else (g ** NORM_TYPE).sum() for g in gs if g.numel()] or [torch.zeros((), dtype=torch.float64)])
    return (parts.max() if NORM_TYPE == math.inf else parts.sum() ** (1 / NORM_TYPE)).item()

def frames(e):  # where the error was raised: the innermost frames of the framework's and torch's files (not this script's, not torch's dispatch)
    tb = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != os.path.abspath(__file__) and not re.search(r"torch/(_ops|_compile|_dynamo/|utils/_python_dispatch|distributed/tensor/debug/)", f.filename)]
    return " < ".join(f"{re.sub(r'^.*/(site|dist)-packages/', '', f.filename)}:{f.lineno} {f.name}" for f in reversed(tb[-3:]))

from deepspeed import init_distributed
from deepspeed.runtime.utils import clip_grad_norm_

def local_param(p):  # a plain parameter over p's local shard; its .grad is the very local tensor of p's gradient
    lp = torch.nn.Parameter(torch.empty(local(p).shape, dtype=p.dtype, device=p.device))
    lp.grad = None if p.grad is None else local(p.grad)
    return lp

def clip(named, meshes):  # the call under test, made the way the framework's trainer makes it
    P = [p for _, p in named]
    LP = [local_param(p) for p in P]
    # deepspeed.initialize calls init_distributed before the engine exists
    init_distributed(dist_backend=dist.get_backend())
    # clip_grad_norm_(parameters, max_norm, norm_type=2, mpu=None): the module's parameters with their local gradients; norm_type is a parameter of the function, passed from the cell
    return clip_grad_norm_(LP, MAX_NORM, norm_type=NORM_TYPE, mpu=None)

def main():
    if os.environ.get("WORLD_SIZE") != str(WORLD):
        return print(f"run me with {WORLD} ranks: torchrun --standalone --nproc-per-node {WORLD} {sys.argv[0]}", file=sys.stderr) or 2
    cuda = torch.cuda.device_count() >= WORLD and os.environ.get("REPRO_DEVICE") != "cpu"  # NCCL when every rank has a GPU
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT, device_id=device if cuda else None)
    rank, control = dist.get_rank(), dist.new_group(backend="gloo", timeout=3 * TIMEOUT)  # control: the verdict's own group, outwaits a hang
    meshes, named = build(device)
    norm, error, where, bad, comm = None, None, "", {}, CommDebugMode()
    try:
        with comm:
            ret = clip(named, meshes)
        norm = float(ret.full_tensor() if isinstance(ret, DTensor) else ret)
    except Exception as e:  # noqa: BLE001 - the target's exception is the finding
        error, where = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}", frames(e)
    every, fails = [None] * WORLD, []
    dist.all_gather_object(every, (norm, error, bad, comm.get_total_counts() - getattr(comm, "local", 0), where), group=control)
    if rank == 0:
        ref, rel = expected_norm(), lambda n: abs(n - ref) / abs(ref) if ref and math.isfinite(ref) and math.isfinite(n) else float("nan")  # |got - expected| <= bound * expected
        print(f"{TARGET} (torch {torch.__version__}, {dist.get_backend()}); clip-parity cell {CELL_ID}\nexpected: norm {ref!r} (float64, this script's generator; clip-parity: {REFERENCE_NORM!r}) on every rank within relative {NORM_BOUND:.3g} ({TOLERANCE}), clip_coef {CLIP_COEF!r}")
        print("\n".join(f"  rank {r}: " + (f"raised {e} (at {w})" if e else f"expected {ref!r} (float64), got {n!r}, rel err {rel(n):.3g}, bound {NORM_BOUND:.3g}") + f"; {c} collectives" + "".join(f"; {k}: {v}" for k, v in b.items()) for r, (n, e, b, c, w) in enumerate(every)))
        eps, raise_wanted = NORM_BOUND, ERROR_IF_NONFINITE and not math.isfinite(ref)  # the checks, in order (raise_wanted: every rank must raise the non-finite error)
        norms, errors = [(r, x[0]) for r, x in enumerate(every) if x[0] is not None], [(r, x[1]) for r, x in enumerate(every) if x[1]]
        far = [(r, n) for r, n in norms if not (n == ref or TOLERANCE == "exact" and n == REFERENCE_NORM or math.isnan(n) and math.isnan(ref) or abs(n - ref) <= eps * abs(ref))]
        found = {"parity.norm": [f"rank {r}: expected {ref!r} (float64), got {n!r}, rel err {rel(n):.3g}, bound {eps:.3g} ({TOLERANCE})" for r, n in far]}
        raised = [f"rank {r} raised {e} (at {w})" for r, (n, e, b, c, w) in enumerate(every) if e and not raise_wanted]
        found = {"errors.raised": raised} if raised else found  # a raise is its own finding: the value checks skip a cell where a rank raised
        fails = [f"{check}: {what[0]}" for check, what in found.items() if what]
        print("".join(f"FAIL {f}\n" for f in fails) + ("REPRODUCED" if fails and not UNSUPPORTED else f"NOT REPRODUCED {UNSUPPORTED}".strip()), flush=True)
    dist.destroy_process_group()
    return int(rank == 0 and bool(fails) and not UNSUPPORTED)  # torchrun exits 1 when rank 0 does

if __name__ == "__main__":
    sys.exit(main())

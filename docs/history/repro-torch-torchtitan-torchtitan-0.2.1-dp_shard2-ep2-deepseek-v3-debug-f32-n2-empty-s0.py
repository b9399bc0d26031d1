"""Reproducer: torchtitan 0.2.1 on dp_shard2,ep2 / deepseek-v3-debug / float32 / 2-norm: errors.raised fail

Framework:  torchtitan 0.2.1 (torch 2.15.0): torchtitan's dist_utils.clip_grad_norm_, called as torchtitan's
            Trainer.train_step calls it (pp_mesh, ep_enabled from ParallelDims)
Releases:   pip install torchtitan==0.2.1
Config:     layout dp_shard2,ep2 (2 ranks), model deepseek-v3-debug, float32 gradients, 2-norm, regime empty (seed
            0), max_norm 1, error_if_nonfinite False: within what torchtitan's trainer builds, per
            adapters/torch/frameworks/torchtitan.json "configurations"
Cause:      - raises AttributeError: 'Tensor' object has no attribute 'full_tensor' (at utils.py:516
            _clip_grad_norm_with_ep < _contextlib.py:158 no_grad < utils.py:438 clip_gra
Minimised:  2 of deepseek-v3-debug's 100 parameters (the first of each pipeline stage and placement of its gradient)
            with no gradient on any rank (regime empty), which alone makes this failure. `clip-parity export --full`
            writes the cell's own gradients and every check.
Expected:   a norm on every rank, no exception
Got:        errors.raised: rank 0 raised on a cell that asks for no error (reference norm 0, error_if_nonfinite
            false) (ranks 0, 1 raised): AttributeError: 'Tensor' object has no attribute 'full_tensor'
            (clip-parity's run of this cell)

Written by clip-parity export; needs torch and torchtitan (gloo; NCCL with a GPU per rank). Checks errors.raised:
REPRODUCED (exit 1) if one fails as above, else NOT REPRODUCED.
    torchrun --standalone --nproc-per-node 2 repro-torch-torchtitan-torchtitan-0.2.1-dp_shard2-ep2-deepseek-v3-debug-f32-n2-empty-s0.py
The cell in clip-parity: npx clip-parity cell --subject torch:torchtitan@torchtitan==0.2.1 --layout dp_shard2,ep2 --model deepseek-v3-debug --dtype f32 --norm 2 --regime empty --seed 0"""
import math
import os
import re
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

CELL_ID, TARGET, UNSUPPORTED = "torch:torchtitan@torchtitan==0.2.1/dp_shard2,ep2/deepseek-v3-debug/f32/n2/empty/s0", "torchtitan 0.2.1", ""
WORLD, LAYOUT = 2, {"pp": 1, "dp_replicate": 1, "dp_shard": 2, "cp": 1, "tp": 1, "ep": 2}
DTYPE, HAS_GRAD = "f32", lambda i: False  # regime empty
NORM_TYPE, MAX_NORM, ERROR_IF_NONFINITE = 2.0, 1.0, False
TIES, LOGICAL = [("tok_embeddings.weight", "mtp.0.embed_tokens.weight")], [  # (index, name, shape, tp style, stage): the first of each stage and placement of deepseek-v3-debug's 100
    (0, "tok_embeddings.weight", [2048, 256], "colwise", 0),
    (1, "layers.0.attention.wq.weight", [3072, 256], "colwise", 0),
]
TIMEOUT = timedelta(seconds=float(os.environ.get("REPRO_TIMEOUT_S", "60")))  # a rank left waiting in a collective raises after it
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}

# ---- support: torchtitan (clip-parity adapters/torch/support/fw_torchtitan.py, verbatim) ---------------------------
# torchtitan 0.3.0 distributed/parallel_dims.py ParallelDims.build_mesh: dense (pp, dp_replicate, fsdp = dp_shard * cp, tp),
# sparse (pp, dp_replicate, efsdp, ep) built when ep > 1; FSDP over (dp_replicate, fsdp), TP over tp; one rank: no wrapping.
MESHES = {"dense": [("dp_replicate", ("dp_replicate",)), ("fsdp", ("dp_shard", "cp")), ("tp", ("tp",))],
          "sparse": [("dp_replicate", ("dp_replicate",)), ("efsdp", ("efsdp",)), ("ep", ("ep",))]}
# ---- end support: torchtitan ---------------------------------------------------------------------------------------
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
    rules["expert"] = {"efsdp": Shard(1), "ep": Shard(0), "dp_shard": Shard(1), "cp": Shard(1), "tp": Shard(1)}
    stage, named = meshes["pp"].get_local_rank(), []
    mine = [(x[1], *x) for x in LOGICAL if x[4] == stage]
    mine += [(fqn, *x) for canon, fqn in TIES for x in LOGICAL if x[1] == canon and x[4] != stage == LAYOUT["pp"] - 1]  # replicas
    for fqn, i, name, shape, style, _ in mine:
        mesh, kind = (meshes["sparse"], "sparse") if style == "expert" else (meshes["dense"], "dense")
        pls = [next((rules[style][a] for a in held if a in rules[style] and (len(held) == 1 or sizes[a] > 1)), Replicate()) for _, held in dims[kind]]
        plain = WORLD == 1  # one process: no mesh, plain tensors, as a user on one rank has them
        p = torch.nn.Parameter(torch.empty(shape, dtype=TORCH_DTYPE[DTYPE], device=device) if plain else distribute_tensor(torch.empty(shape, dtype=TORCH_DTYPE[DTYPE], device=device), mesh, pls, src_data_rank=None))
        if HAS_GRAD(i):  # the logical gradient in the cell's regime, then this rank's part of it
            g = torch.randn(math.prod(shape), generator=torch.Generator().manual_seed(i)).to(TORCH_DTYPE[DTYPE])  # the same on every rank; any values do
            p.grad = g.reshape(shape).to(device) if plain else distribute_tensor(g.reshape(shape).to(device), mesh, pls, src_data_rank=None)
        p.clip_parity_canonical = fqn == name
        named.append((fqn, p))
    return meshes, named


def frames(e):  # where the error was raised: the innermost frames of the framework's and torch's files (not this script's, not torch's dispatch)
    tb = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != os.path.abspath(__file__) and not re.search(r"torch/(_ops|_compile|_dynamo/|utils/_python_dispatch|distributed/tensor/debug/)", f.filename)]
    return " < ".join(f"{re.sub(r'^.*/(site|dist)-packages/', '', f.filename)}:{f.lineno} {f.name}" for f in reversed(tb[-3:]))

from torchtitan.distributed.utils import clip_grad_norm_

def clip(named, meshes):  # the call under test, made the way the framework's trainer makes it
    P = [p for _, p in named]
    # foreach=True, pp_mesh (None when pp = 1) and ep_enabled (ep > 1) as the trainer passes them; norm_type and error_if_nonfinite are parameters of the function (the trainer leaves them at 2.0 and False), passed from the cell
    return clip_grad_norm_(P, MAX_NORM, norm_type=NORM_TYPE, error_if_nonfinite=ERROR_IF_NONFINITE, foreach=True, pp_mesh=meshes["pp"] if LAYOUT["pp"] > 1 else None, ep_enabled=LAYOUT["ep"] > 1)

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
        print(f"{TARGET} (torch {torch.__version__}, {dist.get_backend()}); clip-parity cell {CELL_ID}, minimised\nexpected: a norm on every rank, no exception")
        print("\n".join(f"  rank {r}: " + (f"raised {e} (at {w})" if e else f"returned {n!r}") + f"; {c} collectives across ranks" for r, (n, e, b, c, w) in enumerate(every)))
        norms, errors, raise_wanted, found = [(r, x[0]) for r, x in enumerate(every) if x[0] is not None], [(r, x[1]) for r, x in enumerate(every) if x[1]], False, {}
        raised = [f"rank {r} raised {e} (at {w})" for r, (n, e, b, c, w) in enumerate(every) if e and not raise_wanted]
        found = {"errors.raised": raised} if raised else found  # a raise is its own finding: the value checks skip a cell where a rank raised
        fails = [f"{check}: {what[0]}" for check, what in found.items() if what]
        print("".join(f"FAIL {f}\n" for f in fails) + ("REPRODUCED" if fails and not UNSUPPORTED else f"NOT REPRODUCED {UNSUPPORTED}".strip()), flush=True)
    dist.destroy_process_group()
    return int(rank == 0 and bool(fails) and not UNSUPPORTED)  # torchrun exits 1 when rank 0 does

if __name__ == "__main__":
    sys.exit(main())

"""Reproducer: deepspeed-engine 0.18.5 on single / llama3-debug / bfloat16 / 2-norm: parity.norm, parity.tensors fail

Framework:  deepspeed-engine 0.18.5 (torch 2.15.0): DeepSpeed's engine with bf16 and no ZeRO, driven as a trainer
            drives it (deepspeed.initialize, then engine(batch), engine.backward, engine.step, step after step): its
            step(), where the clip happens, and get_global_grad_norm() after it
Releases:   pip install deepspeed==0.18.5
Config:     layout single (1 ranks), model llama3-debug, bfloat16 gradients, 2-norm, regime active (seed 0),
            max_norm 1, error_if_nonfinite False: within what deepspeed-engine's trainer builds, per
            adapters/torch/frameworks/deepspeed-engine.json "configurations"
Cause:      - the engine's bf16 gradients are never zeroed after a step at ZeRO stage 0 (engine._take_model_step
            zeroes them only under ZeRO: `else: pass`), so the second step's backward adds to the first's and
            get_global_grad_norm() is twice the norm (no replica is counted twice: the cause is the step left
            behind)
            - rank 0, tok_embeddings.weight, element 0: got -0.00000858306884765625, expected
            -0.00009822845458984375 = round(g * 0.0003489409573376179), nor round(g * c) for c in
            0.0003490447998046875, 0.000347137451171875 (the coefficient held in bf16)
Expected:   norm 1432.96240234375 on every rank (exact; the script recomputes it in float64), every gradient scaled
            by clip_coef 0.0006978550227358937
Got:        parity.norm: rank 0: total norm 2865.814453125 != reference 1432.96240234375 (relative error 9.999e-1,
            tolerance bf16)
            parity.tensors: rank 0, tok_embeddings.weight, element 0: got -0.00000858306884765625, expected
            -0.00009822845458984375 = round(g * 0.0003489409573376179), nor round(g * c) for c in
            0.0003490447998046875, 0.000347137451171875 (the coefficient held in bf16) (clip-parity's run of this
            cell)

Written by clip-parity export; needs torch, numpy and deepspeed (gloo; NCCL with a GPU per rank). Checks
parity.norm, parity.tensors, errors.raised: REPRODUCED (exit 1) if one fails as above, else NOT REPRODUCED.
    torchrun --standalone --nproc-per-node 1 repro-torch-deepspeed-engine-deepspeed-0.18.5-single-llama3-debug-bf16-n2-active-s0.py
The cell in clip-parity: npx clip-parity cell --subject torch:deepspeed-engine@deepspeed==0.18.5 --layout single --model llama3-debug --dtype bf16 --norm 2 --regime active --seed 0"""
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

CELL_ID, TARGET, UNSUPPORTED = "torch:deepspeed-engine@deepspeed==0.18.5/single/llama3-debug/bf16/n2/active/s0", "deepspeed-engine 0.18.5", ""
WORLD, LAYOUT = 1, {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "cp": 1, "tp": 1, "ep": 1}
DTYPE, SEED, STEP, MODE, EXP, SPECIAL, HAS_GRAD = "bf16", 0, 0, "gen", 0, None, lambda i: True  # regime active
NORM_TYPE, MAX_NORM, ERROR_IF_NONFINITE = 2.0, 1.0, False
REFERENCE_NORM, CLIP_COEF, TOLERANCE, NORM_BOUND = 1432.96240234375, 0.0006978550227358937, "bf16", 0.015625  # as clip-parity computes them
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

# ---- support: deepspeed-engine (clip-parity adapters/torch/support/fw_deepspeed_engine.py, verbatim) ---------------
# DeepSpeed's engine as a trainer drives it with bf16 and no ZeRO: deepspeed.initialize(model, optimizer,
# config={"bf16": {"enabled": True}, "zero_optimization": {"stage": 0}, "gradient_clipping": max_norm}), then
# loss = engine(batch), engine.backward(loss), engine.step(), step after step. The clip happens inside
# engine.step() (FP16_UnfusedOptimizer.step, which engine._do_optimizer_sanity_check picks for bf16 at stage 0 from
# 0.17.6 on: the norm of the bf16 gradients, their float32 copies unscaled by the loss scale and clipped, then the
# client optimizer's step), and what the engine does around it (the loss scale it applies in backward, the
# gradients it zeroes after the step) decides what that clip is handed. So the engine is driven whole.
class Bf16Engine:
    """An engine over a module whose parameters have the shapes of the given gradients and whose loss,
    sum_i <p_i, g_i> with every g_i fixed, has exactly those gradients. `steps_before` whole steps, then the
    forward and backward of the next: what is left is engine.step(), the call under test, and
    engine.get_global_grad_norm() after it. The client optimizer is SGD(lr=0); its step copies the float32
    gradients the engine hands it (unscaled and clipped: what a user's optimizer steps with) into the given
    gradient tensors, which the checks read. Data-parallel replicas only: the engine all-reduces whole gradients."""

    def __init__(self, grads: list, max_norm: float, steps_before: int = 1):
        import deepspeed

        if any(g.dtype != torch.bfloat16 for g in grads):
            raise ValueError(f"Bf16Engine drives a bf16 engine: gradients of dtype {sorted({str(g.dtype) for g in grads})}")
        self.grads = grads
        self.module = _FixedGradientLoss([g.shape for g in grads], grads[0].device)
        self.client = _CopyingSGD(self.module.parameters())
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True},
            "gradient_clipping": float(max_norm),
            "zero_optimization": {"stage": 0},
            "steps_per_print": 2**31 - 1,
        }
        self.batch = [g.detach().clone() for g in grads]  # the cell's gradients as the loss's fixed factors
        self.engine, _, _, _ = deepspeed.initialize(model=self.module, optimizer=self.client, config=config, dist_init_required=False)
        # armed only now: FP16_UnfusedOptimizer.initialize_optimizer_states steps the client once on zero gradients
        self.client.destinations = grads
        for _ in range(steps_before):
            self.engine.backward(self.engine(*self.batch))
            self.engine.step()
        self.engine.backward(self.engine(*self.batch))

    def inputs(self) -> list:
        """What exists before the call and the step writes into in place: the module's bf16 parameters and
        gradients, the optimizer's float32 master parameters, the batch."""
        masters = [p for group in getattr(self.engine.optimizer, "fp32_groups", []) for p in group]
        params = list(self.module.parameters())
        return params + [p.grad for p in params if p.grad is not None] + masters + self.batch

    def write_back(self) -> None:
        """Nothing: the client optimizer's step already copied what it was handed into the given gradients."""

    def close(self) -> None:
        self.engine.destroy()
        self.batch.clear()


class _FixedGradientLoss(torch.nn.Module):
    """sum_i <p_i, g_i> over bf16 parameters p_i = 0: d loss / d p_i = g_i exactly."""

    def __init__(self, shapes: list, device):
        super().__init__()
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s, dtype=torch.bfloat16, device=device)) for s in shapes])

    def forward(self, *factors):
        return sum((p * g).sum() for p, g in zip(self.ps, factors))


class _CopyingSGD(torch.optim.SGD):
    """SGD(lr=0), whose step first copies each parameter's gradient into its destination tensor (rounded to the
    destination's dtype), once destinations are given: the gradient the engine hands its client optimizer, as the
    checks read it."""

    def __init__(self, params):
        super().__init__(params, lr=0.0)
        self.destinations: list = []

    def step(self, closure=None):
        handed = [p for group in self.param_groups for p in group["params"]]
        for p, d in zip(handed, self.destinations):
            if p.grad is None:
                d.zero_()
            else:
                d.copy_(p.grad)
        return super().step(closure)


def bf16_engine_grads(named: list) -> list:
    """The local gradient of every parameter that has one, refused unless each is whole on the rank (one rank, or
    Replicate over every mesh dimension of more than one rank): the engine without ZeRO all-reduces whole gradients."""
    out = []
    for fqn, p in named:
        if p.grad is None:
            continue
        if isinstance(p.grad, DTensor):
            mesh = p.grad.device_mesh
            if any(not isinstance(pl, Replicate) and mesh.size(i) > 1 for i, pl in enumerate(p.grad.placements)):
                raise ValueError(f"{fqn}: DeepSpeed's engine without ZeRO holds whole gradients on every data-parallel rank, this one is placed {list(p.grad.placements)}")
            out.append(p.grad.to_local())
        else:
            out.append(p.grad)
    if not out:
        raise ValueError("no parameter has a gradient: the engine would have nothing to step")
    return out
# ---- end support: deepspeed-engine ---------------------------------------------------------------------------------
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

def first_bad(named, before, norm):  # {check: the first local gradient that fails it}: not round(float32(g) * coef), unscaled
    grads, found = [(fqn, before[fqn], local(p.grad).detach().cpu()) for fqn, p in named if p.grad is not None], {}
    t = torch.tensor([MAX_NORM, REFERENCE_NORM if TOLERANCE == "exact" else norm, 1e-6], dtype=torch.float32)
    coefs = [torch.clamp(t[0] / (t[1] + t[2]), max=1.0).item()]  # float32, clamped to 1
    coefs.append(torch.clamp(MAX_NORM / (torch.tensor(norm, dtype=TORCH_DTYPE[DTYPE]) + 1e-6), max=1.0).item())  # or in the gradients' dtype, as torch computes it
    ulp = lambda x, bits: 2.0 ** (max(math.floor(math.log2(x)), -14 if DTYPE == "f16" else -126) - bits)  # or FSDP1's: float32, cast to the dtype,
    lo, hi = (torch.clamp(MAX_NORM / (torch.tensor(n, dtype=torch.float32) + 1e-6), max=1.0).to(TORCH_DTYPE[DTYPE]).item() for n in (norm + ulp(norm, 8 if DTYPE == "bf16" else 11), norm - ulp(norm, 8 if DTYPE == "bf16" else 11))) if 0 < norm < math.inf else (1, 0)  # of a norm rounded to norm
    while lo <= hi:
        coefs, lo = coefs + [lo], lo + ulp(lo, 7 if DTYPE == "bf16" else 10)
    misses = [first_mismatch(grads, coef) for coef in coefs]  # one coefficient must scale every gradient of the rank
    if all(misses):
        found["parity.tensors"] = misses[0]
    return found

def first_mismatch(grads, coef):  # the first element that is not round(float32(g) * coef), or None
    for fqn, g0, got in grads:
        want = (g0.float() * coef).to(got.dtype)
        for i in (~((got == want) | (got.isnan() & want.isnan()))).flatten().nonzero()[:1, 0].tolist():
            return f"{fqn} local element {i}: got {got.flatten()[i].item()!r}, expected {want.flatten()[i].item()!r}"
    return None

from deepspeed import init_distributed
from numpy import float32

@torch.utils._python_dispatch._disable_current_modes()  # building the engine, its first step and the backward are not the clip's communication
def bf16_engine(named):  # the engine once: every step of the call uses the same one
    if not hasattr(bf16_engine, "it"):
        bf16_engine.it = Bf16Engine(bf16_engine_grads(named), MAX_NORM)
    return bf16_engine.it.engine

def clip(named, meshes):  # the call under test, made the way the framework's trainer makes it
    P = [p for _, p in named]
    # deepspeed.initialize calls init_distributed before the engine exists
    init_distributed(dist_backend=dist.get_backend())
    # engine.step() after engine.backward(loss), as every DeepSpeed training loop calls it: the clip, the client optimizer's step, the zeroing of the gradients
    ret = bf16_engine(named).step()
    # get_global_grad_norm() -> float: the norm the last step() computed (_global_grad_norm, taken from the optimizer's), what trainers log
    global_grad_norm = bf16_engine(named).get_global_grad_norm()
    # the norm is a Python float (get_global_norm takes the root of a sum of float32 per-group norms in float64); SPEC 6 judges a norm as a float32 value, so it is rounded to the nearest one, which the bf16 class's bound is far above
    global_grad_norm_f32 = float32(global_grad_norm)
    return global_grad_norm_f32

def main():
    if os.environ.get("WORLD_SIZE") != str(WORLD):
        return print(f"run me with {WORLD} ranks: torchrun --standalone --nproc-per-node {WORLD} {sys.argv[0]}", file=sys.stderr) or 2
    cuda = torch.cuda.device_count() >= WORLD and os.environ.get("REPRO_DEVICE") != "cpu"  # NCCL when every rank has a GPU
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT, device_id=device if cuda else None)
    rank, control = dist.get_rank(), dist.new_group(backend="gloo", timeout=3 * TIMEOUT)  # control: the verdict's own group, outwaits a hang
    meshes, named = build(device)
    before = {fqn: local(p.grad).detach().cpu().clone() for fqn, p in named if p.grad is not None}
    norm, error, where, bad, comm = None, None, "", {}, CommDebugMode()
    try:
        with comm:
            ret = clip(named, meshes)
        norm = float(ret.full_tensor() if isinstance(ret, DTensor) else ret)
        bad = first_bad(named, before, norm)
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
        found["parity.tensors"] = [f"rank {r}: {x[2]['parity.tensors']}" for r, x in enumerate(every) if "parity.tensors" in x[2]]
        raised = [f"rank {r} raised {e} (at {w})" for r, (n, e, b, c, w) in enumerate(every) if e and not raise_wanted]
        found = {"errors.raised": raised} if raised else found  # a raise is its own finding: the value checks skip a cell where a rank raised
        fails = [f"{check}: {what[0]}" for check, what in found.items() if what]
        print("".join(f"FAIL {f}\n" for f in fails) + ("REPRODUCED" if fails and not UNSUPPORTED else f"NOT REPRODUCED {UNSUPPORTED}".strip()), flush=True)
    dist.destroy_process_group()
    return int(rank == 0 and bool(fails) and not UNSUPPORTED)  # torchrun exits 1 when rank 0 does

if __name__ == "__main__":
    sys.exit(main())

"""clip-parity's PyTorch adapter: runs a real Python clipping function on DTensor gradients, one cell at a time.

Run by the harness as

    python -m torch.distributed.run --standalone --nproc-per-node W adapters/torch/adapter.py serve SESSION_DIR

The protocol it speaks (files, fields, what happens per job) is described once, in
harness/external/torch/protocol.ts; PROTOCOL_VERSION below mirrors it, and a job of another version is refused
with an error that says so. How a target is called comes with every job: the convention of a framework file
(adapters/torch/frameworks/*.json) or the plain torch:<module>:<function> one, built here by `Call`.
"""
from __future__ import annotations

import gc
import importlib
import inspect
import json
import math
import os
import sys
import time
import traceback
import weakref
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.debug import CommDebugMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

# Mirrors PROTOCOL_VERSION in harness/external/torch/protocol.ts (suites/torch/protocol.test.ts checks it).
PROTOCOL_VERSION = 3

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
DENSE_AXES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
SPARSE_AXES = ("pp", "dp_replicate", "efsdp", "ep")


def write_json(path: str, obj: object) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, allow_nan=False)
    os.replace(tmp, path)


def num(x: float) -> float | str:
    """JSON has no Infinity/NaN: non-finite floats travel as strings."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


# ---- what the target does: collectives and scratch memory ----------------------------------------------

_KINDS = (
    ("all_reduce", "all_reduce"),
    ("allreduce", "all_reduce"),
    ("reduce_scatter", "reduce_scatter"),
    ("all_gather", "all_gather"),
    ("allgather", "all_gather"),
    ("broadcast", "broadcast"),
    ("all_to_all", "all_to_all"),
    ("alltoall", "all_to_all"),
    ("barrier", "barrier"),
)


def _kind(op_name: str) -> str:
    for key, kind in _KINDS:
        if key in op_name:
            return kind
    return "other"


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr() if type(t) is torch.Tensor else -1
    except Exception:  # noqa: BLE001
        return -1


def _group_ranks(args) -> str:
    """The ranks of the process group a collective op ran on, as the harness keys groups: "0,2"."""
    for a in args:
        try:
            if isinstance(a, str):
                pg = c10d._resolve_process_group(a)
            elif isinstance(a, dist.ProcessGroup):
                pg = a
            elif isinstance(a, torch.ScriptObject):
                # c10d ops (dist.all_reduce on a group: torchtitan's PP reduction) carry the group boxed.
                pg = dist.ProcessGroup.unbox(a)
            else:
                continue
            return ",".join(str(r) for r in sorted(dist.get_process_group_ranks(pg)))
        except Exception:  # noqa: BLE001 - a group we cannot name is still counted
            continue
    return "?"


class Monitor(CommDebugMode):
    """torch's CommDebugMode (collective counts), plus per-call bytes and groups, plus scratch memory.

    Memory on CPU: every plain tensor an op returns whose storage is new adds its storage's bytes to the
    live total until the last tensor seen on that storage is garbage; the peak of that total is the scratch.
    """

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = device
        self.calls: list[dict] = []
        self.live = 0
        self.peak = 0
        self._storages: dict[int, list] = {}  # data_ptr -> [nbytes, refs alive]
        self._cuda_base = 0
        self._refs: list = []
        self.known: set = set()  # storages that exist before the call (parameters, gradients)

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._cuda_base = torch.cuda.memory_allocated(self.device)
        return super().__enter__()

    def __exit__(self, *exc):
        r = super().__exit__(*exc)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self._cuda_base
        return r

    def live_bytes(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device) - self._cuda_base
        return self.live

    def _track(self, t: torch.Tensor, inputs: set) -> None:
        if type(t) is not torch.Tensor or t.device.type != "cpu" or t.is_meta:
            return
        try:
            st = t.untyped_storage()
            ptr, nbytes = st.data_ptr(), st.nbytes()
        except Exception:  # noqa: BLE001
            return
        if nbytes == 0:
            return
        entry = self._storages.get(ptr)
        if entry is None and (ptr in inputs or ptr in self.known):
            return  # a view of, or an in-place op on, memory that existed before the call
        if entry is None:
            entry = self._storages[ptr] = [nbytes, 0]
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        entry[1] += 1

        def gone(_ref, ptr=ptr, entry=entry):
            entry[1] -= 1
            if entry[1] == 0 and self._storages.get(ptr) is entry:
                del self._storages[ptr]
                self.live -= entry[0]

        self._refs.append(weakref.ref(t, gone))  # a weakref's callback fires only while the ref lives

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is NotImplemented:
            return out
        name = getattr(getattr(func, "_overloadpacket", None), "__name__", str(func))
        pkt = getattr(func, "_overloadpacket", None)
        if pkt is not None and (pkt in self.comm_registry or pkt in _C10D_OPS):
            nbytes = sum(t.numel() * t.element_size() for t in _tensors(args[0] if args else ()))
            self.calls.append({"op": name, "kind": _kind(name), "group": _group_ranks(list(args) + list((kwargs or {}).values())), "bytes": nbytes})
        if self.device.type == "cpu":
            inputs = {_ptr(t) for t in _tensors(list(args) + list((kwargs or {}).values()))}
            for t in _tensors(out):
                self._track(t, inputs)
        return out

    def record(self) -> dict:
        by_kind: dict[str, dict] = {}
        by_group: dict[str, dict] = {}
        for c in self.calls:
            for table, key in ((by_kind, c["kind"]), (by_group, c["group"])):
                e = table.setdefault(key, {"calls": 0, "bytes": 0})
                e["calls"] += 1
                e["bytes"] += c["bytes"]
        return {
            "calls": len(self.calls),
            "bytes": sum(c["bytes"] for c in self.calls),
            "byKind": by_kind,
            "byGroup": by_group,
            "ops": self.calls,
        }


def c10d_counts(groups: list) -> dict:
    """Each group's c10d sequence number: the collectives its backend has started, counted below any
    Python dispatch mode (a target inside torch.utils._python_dispatch._disable_current_modes() hides its
    collectives from the Monitor, not from its process group)."""
    counts = {}
    for g in groups:
        try:
            counts[id(g)] = (g, int(g._get_sequence_number_for_group()))
        except Exception:  # noqa: BLE001 - a backend without sequence numbers is counted by the Monitor only
            continue
    return counts


def count_unseen(mon: "Monitor", groups: list, before: dict) -> None:
    """Adds to the Monitor's calls the collectives the groups' backends started during the call beyond those
    the Monitor saw, so that the harness counts what ran, not what a dispatch mode was shown. Each collective
    advances exactly one group's sequence number, so the totals compare (groups with the same ranks too);
    an unseen one is named by a group that ran more than the Monitor saw on its ranks."""
    after = c10d_counts(groups)
    ran = {key: after[key][1] - n0 for key, (g, n0) in before.items() if key in after}
    unseen = sum(ran.values()) - len(mon.calls)
    if unseen <= 0:
        return
    named = []
    for key, n in ran.items():
        ranks = ",".join(str(r) for r in sorted(dist.get_process_group_ranks(before[key][0])))
        named += [ranks] * max(0, n - sum(1 for c in mon.calls if c["group"] == ranks))
    for i in range(unseen):
        group = named[i] if i < len(named) else "?"
        mon.calls.append({"op": "c10d collective unseen by the dispatch monitor", "kind": "other", "group": group, "bytes": 0})


try:
    from torch.distributed.tensor.debug._comm_mode import c10d_collective_ops as _C10D_OPS
except Exception:  # noqa: BLE001 - older/newer torch: fall back to the registry only
    _C10D_OPS = set()


# ---- one cell -------------------------------------------------------------------------------------------


class JobError(Exception):
    """A job this adapter cannot run (a protocol mismatch, a malformed job): an adapter error, not the target's."""


def check_job(job: dict) -> None:
    version = job.get("protocol")
    if version != PROTOCOL_VERSION:
        raise JobError(
            f"the job speaks protocol {version!r}, this adapter {PROTOCOL_VERSION}: adapters/torch/adapter.py and "
            "harness/external/torch/protocol.ts come from different versions of clip-parity"
        )
    if job.get("kind") not in ("clip", "quit"):
        raise JobError(f"job kind {job.get('kind')!r} is not clip or quit")
    if job["kind"] == "clip":
        need = ("rank", "world", "layout", "dtype", "maxNorm", "normType", "errorIfNonfinite", "foreach", "collectiveTimeoutS", "convention", "grads", "result", "params")
        missing = [k for k in need if k not in job]
        if missing:
            raise JobError(f"the job lacks {', '.join(missing)} (protocol {PROTOCOL_VERSION})")


def placement(p: dict):
    if p["kind"] == "shard":
        return Shard(int(p["dim"]))
    if p["kind"] == "replicate":
        return Replicate()
    if p["kind"] == "partial":
        return Partial()
    raise JobError(f"unknown placement {p!r}")


def contiguous_stride(shape: list[int]) -> tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def load_target(spec: str):
    module, _, qual = spec.partition(":")
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{spec} is not callable")
    return obj


def mesh_axes(layout: dict) -> dict[str, list[str]]:
    """The axes each stage sub-mesh is built with: those of size > 1, as torchtitan's ParallelDims builds its
    meshes (a degree-1 dimension is not a mesh dimension there; DTensor's sharding propagation also costs
    seconds per op for every extra dimension). The sparse mesh keeps `ep` even at size 1, so an EP-aware
    target (torchtitan: `"ep" in p.device_mesh.mesh_dim_names`) still finds the expert parameters; a dense
    mesh with no axis left keeps `dp_shard` (size 1), so every parameter is a DTensor in every cell."""
    sizes = dict(layout)
    sizes["efsdp"] = layout["dp_shard"] * layout["cp"] * layout["tp"] // layout["ep"]
    dense = [a for a in DENSE_AXES[1:] if sizes[a] > 1] or ["dp_shard"]
    return {
        "dense": dense,
        "sparse": [a for a in SPARSE_AXES[1:] if sizes[a] > 1 or a == "ep"],
        "sizes": sizes,
    }


def build_meshes(layout: dict, device_type: str) -> dict:
    """The dense mesh (pp, dp_replicate, dp_shard, cp, tp) and the sparse mesh (pp, dp_replicate, efsdp, ep)
    over the same ranks, row-major (SPEC section 3); each parameter lives on its stage's sub-mesh (without pp),
    trimmed to the axes of mesh_axes()."""
    world = dist.get_world_size()
    axes = mesh_axes(layout)
    sizes = axes["sizes"]
    ranks = torch.arange(world)
    out: dict = {"axes": axes, "pp": None}
    full = {}
    for name, all_axes in (("dense", DENSE_AXES), ("sparse", SPARSE_AXES)):
        keep = ["pp"] + axes[name]
        shape = [sizes[a] for a in all_axes]
        # Drop the size-1 axes we do not keep: a reshape of the same row-major rank order.
        mesh = DeviceMesh(device_type, ranks.reshape([sizes[a] for a in keep]), mesh_dim_names=tuple(keep))
        assert torch.equal(ranks.reshape(shape).reshape([sizes[a] for a in keep]), mesh.mesh)
        full[name] = mesh
        out[name] = mesh[tuple(axes[name])]
    out["pp"] = full["dense"]["pp"]
    groups = {id(g): g for mesh in full.values() for g in mesh.get_all_groups()}
    groups.setdefault(id(dist.group.WORLD), dist.group.WORLD)
    out["groups"] = list(groups.values())
    return out


def set_collective_timeout(groups: list, timeout: timedelta) -> None:
    """c10d's timeout on the cell's groups. Set to the job's collectiveTimeoutS for the target's call, a rank
    left waiting in a collective that a peer never issued raises c10d's own timeout error after that long (the
    harness reports it as a hang) instead of blocking until the harness gives up on the whole cell; set back
    to the session's long timeout afterwards, for what the adapter itself does between cells (building meshes)."""
    for g in groups:
        dist.set_timeout(timeout, g)


class Mpu:
    """A Megatron-style model-parallel unit over the layout: what Megatron-DeepSpeed passes to
    deepspeed.initialize(mpu=...), and DeepSpeed's norm reduces over. Its model-parallel group is pp x tp
    (Megatron's _MODEL_PARALLEL_GROUP: tensor and pipeline together), data parallel is dp_replicate x dp_shard x
    cp. Built once per layout (every rank creates every group, as new_group requires)."""

    def __init__(self, layout: dict):
        pp, tp = layout["pp"], layout["tp"]
        grid = torch.arange(dist.get_world_size()).reshape(pp, -1, tp)  # (pp, data, tp), row-major
        rows = {  # each row one group's ranks
            "model": grid.permute(1, 0, 2).reshape(-1, pp * tp),
            "tensor_model": grid.reshape(-1, tp),
            "pipeline_model": grid.permute(1, 2, 0).reshape(-1, pp),
            "data": grid.permute(0, 2, 1).reshape(-1, grid.shape[1]),
        }
        self.groups = {kind: dist.new_subgroups_by_enumeration(r.tolist())[0] for kind, r in rows.items()}
        for kind, g in self.groups.items():
            setattr(self, f"get_{kind}_parallel_group", lambda g=g: g)
            setattr(self, f"get_{kind}_parallel_rank", lambda g=g: dist.get_rank(g))
            setattr(self, f"get_{kind}_parallel_world_size", lambda g=g: dist.get_world_size(g))


def param_mesh(p: dict, job: dict, meshes: dict):
    """(mesh, placements) of one physical copy. Experts stay on the sparse mesh unless the convention says
    that the framework keeps them on the dense mesh at ep = 1 (torchtitan): their efsdp split then runs over
    the dense axes dp_shard, cp and tp, which hold the same ranks in the same row-major order, so the local
    block is the same tensor and only the mesh it is a DTensor on changes."""
    axes = meshes["axes"]
    by_axis = dict(zip(p["meshAxes"], p["placements"]))
    name = p["mesh"]
    if name == "sparse" and job["layout"]["ep"] == 1 and job["convention"].get("experts") == "dense-mesh-when-ep1":
        name = "dense"
        efsdp = by_axis.get("efsdp", {"kind": "replicate"})
        by_axis = {"dp_replicate": by_axis.get("dp_replicate", {"kind": "replicate"}), "dp_shard": efsdp, "cp": efsdp, "tp": efsdp}
    keep = axes[name]
    missing = [a for a in keep if a not in by_axis]
    if missing:
        raise JobError(f"{p['fqn']}: mesh axes {p['meshAxes']} lack {missing} of the {name} mesh")
    # The placements on the axes the mesh keeps (a placement on a size-1 axis changes nothing).
    return meshes[name], [placement(by_axis[a]) for a in keep]


class ParamsModel(torch.nn.Module):
    """What a trainer passes as `model`: parameters() and named_parameters() over the rank's physical copies,
    named by physical FQN (a module tree is not needed for that, and building one per cell costs time)."""

    def __init__(self, named: list):
        super().__init__()
        self._clip_parity_named = named

    def parameters(self, recurse: bool = True):
        return iter([p for _, p in self._clip_parity_named])

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return iter([(prefix + n, p) for n, p in self._clip_parity_named])


class Fsdp1Root:
    """What FSDP1 (FullyShardedDataParallel with flat parameters) holds when a trainer clips after backward, built
    from the cell: one root instance over every parameter (use_orig_params=False, the default), FULL_SHARD over
    dp_shard, HYBRID_SHARD over (dp_replicate, dp_shard), NO_SHARD over dp_replicate alone; lazily initialised, as
    the forward pass leaves it; its FlatParameter's .grad the rank's shard of the flattened gradients, which is what
    its reduce-scatter leaves. FSDP1 shards the concatenation of all parameters, not each one by dim 0 as the
    cell does, so the cell's full gradients are gathered to build that shard (before the monitored call) and
    write_back() copies the clipped values into the cell's own local shards afterwards, for the checks."""

    def __init__(self, cell: "Cell"):
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp._runtime_utils import _lazy_init

        layout, names = cell.job["layout"], cell.meshes["dense"].mesh_dim_names
        beyond = [f"{a}({layout[a]})" for a in ("pp", "cp", "tp", "ep") if layout[a] > 1]
        if beyond:
            raise JobError(f"FSDP1's flat parameters shard over dp_replicate and dp_shard only, the layout has {', '.join(beyond)}")
        self.cell = cell
        self.order = [(fqn, p) for fqn, p in cell.params]
        if any(not p.clip_parity_canonical for _, p in self.order):
            raise JobError("FSDP1 holds one copy of a tied parameter: the cell has a tied replica")
        full = {fqn: p.grad.full_tensor() for fqn, p in self.order if p.grad is not None}
        module = torch.nn.Module()
        for i, (fqn, p) in enumerate(self.order):
            module.register_parameter(f"p{i}", torch.nn.Parameter(torch.empty(p.shape, dtype=cell.dtype, device=cell.device)))
        if "dp_replicate" in names and "dp_shard" in names:
            how = {"sharding_strategy": ShardingStrategy.HYBRID_SHARD, "device_mesh": cell.meshes["dense"]}
        elif "dp_replicate" in names:
            how = {"sharding_strategy": ShardingStrategy.NO_SHARD, "process_group": cell.meshes["dense"].get_group("dp_replicate")}
        else:
            how = {"sharding_strategy": ShardingStrategy.FULL_SHARD, "process_group": cell.meshes["dense"].get_group("dp_shard")}
        self.root = FullyShardedDataParallel(module, use_orig_params=False, sync_module_states=False, device_id=cell.device, **how)
        # what a trainer's first forward and first clip leave behind, which every later step reuses
        _lazy_init(self.root, self.root)
        self.root._zero_scalar = torch.tensor(0.0, device=cell.device)
        self.handle = self.root._handle
        fp = self.handle.flat_param
        if list(fp._fqns) != [f"p{i}" for i in range(len(self.order))]:
            raise JobError(f"FSDP1 flattened the parameters as {list(fp._fqns)[:4]}..., not in module order")
        pieces = []
        slots = iter(self.order)
        for numel, pad in zip(fp._numels_with_padding, fp._is_padding_mask):
            g = None if pad else full.get(next(slots)[0])
            pieces.append(torch.zeros(numel, dtype=cell.dtype, device=cell.device) if g is None else g.reshape(-1))
        flat = torch.cat(pieces)
        if self.handle.uses_sharded_strategy:
            n, r = fp.numel(), self.handle.rank
            flat = torch.nn.functional.pad(flat, (0, n * self.handle.world_size - flat.numel()))[r * n : (r + 1) * n]
        # after backward FSDP1 holds a flat gradient when any parameter has one, zeros for the others
        fp.grad = flat.clone() if full else None

    def write_back(self) -> None:
        """The clipped flat gradient into the cell's local shards (FSDP1's unsharded order, padding skipped)."""
        g = self.handle.flat_param.grad
        if g is None:  # the target dropped the flat gradient: so are the cell's copies (the harness reports them missing)
            for _, p in self.order:
                p.grad = None
            return
        if self.handle.uses_sharded_strategy:
            parts = [torch.empty_like(g) for _ in range(self.handle.world_size)]
            dist.all_gather(parts, g.contiguous(), group=self.root.process_group)
            g = torch.cat(parts)
        offset, slots = 0, iter(self.order)
        for numel, pad in zip(self.handle.flat_param._numels_with_padding, self.handle.flat_param._is_padding_mask):
            if not pad:
                fqn, p = next(slots)
                if p.grad is not None:
                    block = self.cell.by_fqn[fqn]["block"]
                    part = g[offset : offset + numel].view(p.shape)[tuple(slice(s, s + n) for s, n in zip(block["start"], block["len"]))]
                    p.grad.to_local().copy_(part)
            offset += numel


class ZeroRoot:
    """What DeepSpeed's ZeRO stage 1/2 optimizer (DeepSpeedZeroOptimizer, stage_1_and_2.py) holds when its step()
    computes the norm, built from the cell: an engine from deepspeed.initialize over a module of the cell's
    parameters, each whole over the data-parallel axes and split over tp as a Megatron-DeepSpeed model splits it
    (tensor_model_parallel set; the engine gets the layout's mpu, as Megatron-DeepSpeed passes one), in
    the cell's dtype, the torch optimizer SGD(lr=0) inside it, and its averaged_gradients as the end of backward
    leaves them at the accumulation boundary (independent_gradient_partition_epilogue: get_all_grad_tensors over
    params_in_partition, then get_flat_partition): the rank's partition of the reduced gradients, piece by
    parameter. The reduction itself is not rerun: every rank is given the reduced gradients, as FSDP1's shard is.
    `partitions` are the flat float32 partitions step() builds from them and hands to unscale_and_clip_grads;
    write_back() gathers the clipped partitions and copies them into the cell's own local shards."""

    def __init__(self, cell: "Cell", stage: int):
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        layout = cell.job["layout"]
        beyond = [f"{a}({layout[a]})" for a in ("pp", "ep") if layout[a] > 1]
        if beyond:
            raise JobError(f"DeepSpeed ZeRO-2 is built here over dp_replicate, dp_shard, cp and tp only, the layout has {', '.join(beyond)}")
        if any(not p.clip_parity_canonical for _, p in cell.params):
            raise JobError("DeepSpeed ZeRO holds one copy of a tied parameter: the cell has a tied replica")
        self.cell = cell
        module = torch.nn.Module()
        self.split: dict = {}  # fqn -> the placements of the module's tensor: the cell's on tp, Replicate elsewhere
        self.grads = []
        for i, (fqn, p) in enumerate(cell.params):
            names = p.device_mesh.mesh_dim_names
            split = [pl if n == "tp" and isinstance(pl, Shard) else Replicate() for n, pl in zip(names, p.placements)]
            shape, _ = compute_local_shape_and_global_offset(p.shape, p.device_mesh, split)
            mp = torch.nn.Parameter(torch.empty(shape, dtype=cell.dtype, device=cell.device))
            mp.tensor_model_parallel = any(isinstance(pl, Shard) and p.device_mesh.size(d) > 1 for d, pl in enumerate(split))
            if p.grad is not None:  # as every rank holds it once the data-parallel reduction is done
                mp.grad = p.grad.redistribute(p.device_mesh, split).to_local()
                self.grads.append(mp.grad)
            self.split[fqn] = split
            module.register_parameter(f"p{i}", mp)
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_clipping": float(cell.job["maxNorm"]),
            "zero_optimization": {"stage": stage},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 2**31 - 1,
        }
        if cell.dtype == torch.bfloat16:
            config["bf16"] = {"enabled": True}
        elif cell.dtype == torch.float16:
            config["fp16"] = {"enabled": True, "loss_scale": 1.0}  # static: the cell's gradients are not scaled
        # always an mpu: DeepSpeed keeps the last engine's mpu process-wide (deepspeed.utils.groups.mpu), so an engine
        # built without one after one built with one reads the stale one
        mpu = cell.arg("mpu")
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=module, optimizer=torch.optim.SGD(module.parameters(), lr=0.0), config=config, mpu=mpu, dist_init_required=False)
        opt = self.optimizer
        if type(opt).__name__ != "DeepSpeedZeroOptimizer":
            raise JobError(f"deepspeed.initialize built a {type(opt).__name__}, not the DeepSpeedZeroOptimizer of ZeRO stage {stage}")
        fqn_of = {id(mp): fqn for mp, (fqn, _) in zip(module.parameters(), cell.params)}
        self.offsets = [[(fqn_of[id(mp)], off) for mp, off in zip(group, opt.round_robin_bit16_offsets[i])] for i, group in enumerate(opt.round_robin_bit16_groups)]
        self.shapes = {fqn_of[id(mp)]: mp.shape for mp in module.parameters()}
        if opt.use_grad_accum_attribute:
            for mp in module.parameters():
                mp.grad_accum, mp.grad = mp.grad, None
        self.partitions = []
        for i in range(len(opt.bit16_groups)):
            # a parameter without a gradient took no part in the loss: get_all_grad_tensors gives it zeros
            opt.all_grad_tensors[i] = opt.get_all_grad_tensors(opt.params_in_partition[i], dtype=opt.gradient_accumulation_dtype)
            opt.averaged_gradients[i] = opt.get_flat_partition(
                opt.params_in_partition[i], opt.first_offset[i], opt.partition_size[i], dtype=opt.gradient_accumulation_dtype,
                device=get_accelerator().current_device_name(), param_group_idx=i, return_tensor_list=True)
            opt.all_grad_tensors[i] = None
            last = dist.get_rank(group=opt.real_dp_process_group[i]) == dist.get_world_size(group=opt.real_dp_process_group[i]) - 1
            flat = opt.flatten_dense_tensors_aligned(opt.averaged_gradients[i], int(opt.partition_size[i])) if last else opt.flatten(opt.averaged_gradients[i])
            self.partitions.append(flat.to(opt.single_partition_of_fp32_groups[i].dtype))

    def write_back(self) -> None:
        """The clipped partitions, gathered over each group's data-parallel ranks, into the cell's local shards."""
        opt = self.optimizer
        for i, part in enumerate(self.partitions):
            group = opt.real_dp_process_group[i]
            parts = [torch.empty_like(part) for _ in range(dist.get_world_size(group=group))]
            dist.all_gather(parts, part.contiguous(), group=group)
            flat = torch.cat(parts)
            for fqn, offset in self.offsets[i]:
                p, shape = self.cell.param_by_fqn[fqn], self.shapes[fqn]
                if p.grad is not None:
                    clipped = flat[offset : offset + shape.numel()].view(shape)
                    d = DTensor.from_local(clipped, p.device_mesh, self.split[fqn], run_check=False, shape=p.shape, stride=p.stride())
                    p.grad.to_local().copy_(d.redistribute(p.device_mesh, p.grad.placements).to_local())

    def close(self) -> None:
        self.engine.destroy()
        self.partitions.clear()


UNSET = object()


class Cell:
    """One job's objects on this rank, built lazily: only what the convention asks for."""

    def __init__(self, job: dict, device: torch.device, meshes: dict, grads: dict):
        self.job = job
        self.device = device
        self.meshes = meshes
        self.dtype = DTYPES[job["dtype"]]
        self.params: list[tuple[str, torch.nn.Parameter]] = []
        self.local: dict[str, torch.nn.Parameter] | None = None
        self.local_grads: dict[str, torch.Tensor] = {}
        self.results: dict = {}
        self.fsdp1: Fsdp1Root | None = None
        self.zero: ZeroRoot | None = None
        kw_cache: dict = {}
        for p in job["params"]:
            mesh, pls = param_mesh(p, job, meshes)
            shape = [int(s) for s in p["globalShape"]]
            local_shape = [int(s) for s in p["block"]["len"]]
            g = None
            if p["hasGrad"]:
                g = grads.pop(p["fqn"], None)
                if g is None:
                    raise JobError(f"{p['fqn']}: the gradient file has no tensor of that name")
                if list(g.shape) != local_shape or g.dtype != self.dtype:
                    raise JobError(f"{p['fqn']}: gradient file holds {g.dtype} {list(g.shape)}, expected {self.dtype} {local_shape}")
                g = g.to(device)
            key = tuple(shape)
            kw = kw_cache.get(key)
            if kw is None:
                kw = kw_cache[key] = {"run_check": False, "shape": torch.Size(shape), "stride": contiguous_stride(shape)}
            # The parameter's values are never read by a clip: uninitialised memory costs nothing to make.
            param = torch.nn.Parameter(DTensor.from_local(torch.empty(local_shape, dtype=self.dtype, device=device), mesh, pls, **kw))
            if g is not None:
                param.grad = DTensor.from_local(g, mesh, pls, **kw)
            # What model.named_parameters() and a tie map would tell a trainer: its physical name, and (for tied
            # copies such as DeepSeek-V3's MTP embedding replica) that it is not the canonical copy.
            param.clip_parity_fqn = p["fqn"]
            param.clip_parity_name = p["name"]
            param.clip_parity_canonical = bool(p["canonical"])
            self.params.append((p["fqn"], param))
        self.by_fqn = {p["fqn"]: p for p in job["params"]}
        self.param_by_fqn = dict(self.params)

    def local_params(self) -> list:
        """Plain parameters whose .grad is the very local tensor of the DTensor gradient (in-place clipping
        shows on both)."""
        if self.local is None:
            self.local = {}
            for fqn, param in self.params:
                lp = torch.nn.Parameter(torch.empty(param.to_local().shape, dtype=self.dtype, device=self.device))
                if param.grad is not None:
                    lp.grad = param.grad.to_local()
                    self.local_grads[fqn] = lp.grad
                lp.clip_parity_fqn = fqn
                lp.clip_parity_canonical = param.clip_parity_canonical
                # What a Megatron/DeepSpeed model sets on its parameters and their norms read: split over the
                # tensor-parallel ranks (tp, or the experts' efsdp over the same ranks), and a pipeline's tied
                # replica that is not the owner's copy.
                p, sizes = self.by_fqn[fqn], self.meshes["axes"]["sizes"]
                lp.tensor_model_parallel = any(k["kind"] != "replicate" and sizes.get(a, 1) > 1 for a, k in zip(p["meshAxes"], p["placements"]) if a in ("tp", "efsdp"))
                lp.ds_pipe_replicated = not param.clip_parity_canonical
                self.local[fqn] = lp
        return list(self.local.values())

    def arg(self, a):
        if isinstance(a, dict):
            if "const" in a:
                return a["const"]
            if "result" in a:
                return self.results[a["result"]]
            raise JobError(f"unknown argument {a!r}")
        job = self.job
        if a == "params":
            return [p for _, p in self.params]
        if a == "model":
            return ParamsModel(self.params)
        if a == "grads":
            return [p.grad for _, p in self.params if p.grad is not None]
        if a == "local_params":
            return self.local_params()
        if a == "grads_for_norm":
            self.local_params()
            return [g for fqn, g in self.local_grads.items() if self.by_fqn[fqn]["countedHere"]]
        if a == "local_grads":
            return [lp.grad for lp in self.local_params() if lp.grad is not None]
        if a == "mpu":
            if "mpu" not in self.meshes:
                self.meshes["mpu"] = Mpu(job["layout"])
                self.meshes["groups"].extend(self.meshes["mpu"].groups.values())
            return self.meshes["mpu"]
        if a == "grads_for_norm_deepspeed":
            # BF16_Optimizer.get_grads_for_norm's selection, with DeepSpeed's own predicates: no pipeline tied
            # replica, and a tensor-parallel duplicate only on tensor-parallel rank 0
            from deepspeed.runtime.utils import is_model_parallel_parameter
            from deepspeed.utils.bwc import bwc_tensor_model_parallel_rank
            tp_rank = bwc_tensor_model_parallel_rank(mpu=self.arg("mpu"))
            return [lp.grad for lp in self.local_params() if lp.grad is not None and not lp.ds_pipe_replicated and (tp_rank == 0 or is_model_parallel_parameter(lp))]
        if a == "fsdp1_module":
            if self.fsdp1 is None:
                self.fsdp1 = Fsdp1Root(self)
            return self.fsdp1.root
        if a in ("zero_optimizer", "zero_grad_partitions"):
            if self.zero is None:
                self.zero = ZeroRoot(self, stage=2)
            return self.zero.optimizer if a == "zero_optimizer" else self.zero.partitions
        if a == "max_norm":
            return float(job["maxNorm"])
        if a == "norm_type":
            return math.inf if job["normType"] == "inf" else float(job["normType"])
        if a == "error_if_nonfinite":
            return bool(job["errorIfNonfinite"])
        if a == "foreach":
            return UNSET if job["foreach"] is None else bool(job["foreach"])
        if a == "pp_mesh":
            return self.meshes["pp"] if job["layout"]["pp"] > 1 else None
        if a == "world_group":
            return dist.group.WORLD
        if a == "ep_enabled":
            return job["layout"]["ep"] > 1
        if a == "experts_present":
            return bool(job.get("expertsPresent", any(p["mesh"] == "sparse" for p in job["params"])))
        if a == "dist_backend":
            return dist.get_backend()
        raise JobError(f"unknown argument source {a!r}")

    def built_inputs(self) -> list:
        """Gradient tensors an argument source built from the cell's (FSDP1's flat shard, ZeRO's gathered
        gradients and flat partitions): inputs of the call, not scratch, for the monitor."""
        g = self.fsdp1.handle.flat_param.grad if self.fsdp1 is not None else None
        return ([] if g is None else [g]) + ([*self.zero.grads, *self.zero.partitions] if self.zero is not None else [])

    def after_call(self) -> bool:
        """Copies what the target clipped in tensors an argument source built back into the cell's own
        (FSDP1's flat shard, ZeRO's partitions); whether there was any. Only after a call that returned: a raise
        may have left some ranks out of the gathers this takes."""
        if self.fsdp1 is not None:
            self.fsdp1.write_back()
        if self.zero is not None:
            self.zero.write_back()
        return self.fsdp1 is not None or self.zero is not None

    def close(self) -> None:
        """Releases what an argument source built for this cell alone (ZeRO's engine)."""
        if self.zero is not None:
            self.zero.close()
            self.zero = None

    def clipped(self) -> list:
        """(fqn, local gradient) of every copy that has one, as the target left them."""
        out = []
        for fqn, param in self.params:
            g = param.grad
            lp = self.local.get(fqn) if self.local else None
            if lp is not None and lp.grad is not self.local_grads.get(fqn):
                g = lp.grad  # the target replaced the local .grad instead of scaling it in place
            if g is None:
                continue
            local = g.to_local() if isinstance(g, DTensor) else g
            out.append((fqn, local.detach().to("cpu")))
        return out

    def missing(self, clipped: list) -> list:
        """The copies that had a gradient and have none after the call (clipped: what clipped() returned)."""
        have = {fqn for fqn, _ in clipped}
        return [fqn for fqn, p in self.by_fqn.items() if p["hasGrad"] and fqn not in have]


class Targets:
    """Resolved targets, receivers built from factories and setup calls done, for the life of the session."""

    def __init__(self):
        self.fns: dict = {}
        self.instances: dict = {}
        self.setup_done: set = set()

    def fn(self, target: str):
        f = self.fns.get(target)
        if f is None:
            f = self.fns[target] = load_target(target)
        return f

    def bound(self, step: dict, cell: Cell):
        """The callable for a step and the arguments it takes before the declared ones."""
        receiver = step.get("receiver", "none")
        if receiver == "none":
            return self.fn(step["target"]), []
        if receiver == "unused":
            return self.fn(step["target"]), [None]
        if "arg" in receiver:  # an object the cell's argument source builds for this cell alone
            inst = cell.arg(receiver["arg"])
        else:
            key = json.dumps(receiver, sort_keys=True)
            inst = self.instances.get(key)
            if inst is None:
                factory = self.fn(receiver["factory"])
                inst = self.instances[key] = factory(**{k: cell.arg(v) for k, v in receiver.get("kwargs", {}).items()})
        module, _, qual = step["target"].partition(":")
        owner, _, method = qual.rpartition(".")
        if owner and not isinstance(inst, self.fn(f"{module}:{owner}")):
            raise JobError(f"{receiver.get('factory', receiver.get('arg'))} built a {type(inst).__name__}, not a {owner}")
        return getattr(inst, method), []

    def setup(self, convention: dict, cell: Cell) -> None:
        for step in convention.get("setup", []):
            key = json.dumps(step, sort_keys=True)
            if key in self.setup_done:
                continue
            fn, pre = self.bound(step, cell)
            fn(*pre, *[cell.arg(a) for a in step.get("args", [])], **{k: cell.arg(v) for k, v in step.get("kwargs", {}).items()})
            self.setup_done.add(key)


def choose_path(convention: dict, cell: Cell, targets: Targets) -> dict:
    for path in convention["paths"]:
        when = path["when"]
        if when == "always":
            return path
        pred = targets.fn(when["predicate"])
        if pred(p.grad for _, p in cell.params if p.grad is not None):
            return path
    raise JobError("no path of the convention applies (the last one should be `always`)")


def prepare_call(step: dict, cell: Cell, targets: Targets):
    """(fn, args, kwargs) of one step, built from the convention: arguments it declares, never guessed."""
    fn, pre = targets.bound(step, cell)
    args = list(pre)
    for a in step.get("args", []):
        v = cell.arg(a)
        if v is UNSET:
            raise JobError(f"{step['target']}: argument {a!r} is unset and cannot be left out of a positional list")
        args.append(v)
    kwargs = {}
    for k, a in step.get("kwargs", {}).items():
        v = cell.arg(a)
        if v is not UNSET:
            kwargs[k] = v
    if step.get("ifNamed"):
        try:
            names = set(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            names = set()
        for k, a in step["ifNamed"].items():
            if k in names:
                v = cell.arg(a)
                if v is not UNSET:
                    kwargs[k] = v
    return fn, args, kwargs


def call_steps(path: dict, cell: Cell, targets: Targets, first: tuple, used_kwargs: set):
    """Calls the path's steps in order; returns the last one's value. A later step may use an earlier one's
    result, so it is prepared when its turn comes. Its arguments (clip_grads_with_norm_'s total_norm) live in
    this frame only: none is still held when run_job measures what the call left allocated."""
    ret = None
    for i, step in enumerate(path["steps"]):
        fn, args, kwargs = first if i == 0 else prepare_call(step, cell, targets)
        used_kwargs.update(kwargs)
        ret = fn(*args, **kwargs)
        if step.get("saveAs"):
            cell.results[step["saveAs"]] = ret
    return ret


def run_job(job: dict, device: torch.device, meshes: dict, targets: Targets) -> dict:
    """Runs one cell on this rank: the clipped local gradients go back into job["grads"]; returns the result json."""
    rank = dist.get_rank()
    timings = {}
    t0 = time.perf_counter()
    # the clipped gradients go back into the input file, mapped shared (no copy in, none out)
    grads, _ = st_io.load(job["grads"], shared=True)
    mapped = dict(grads)
    timings["load"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    cell = Cell(job, device, meshes, grads)
    del grads
    convention = job["convention"]
    targets.setup(convention, cell)
    path = choose_path(convention, cell, targets)
    calls = [prepare_call(step, cell, targets) for step in path["steps"][:1]]
    timings["params"] = time.perf_counter() - t0

    result: dict = {"protocol": PROTOCOL_VERSION, "rank": rank, "norm": None, "error": None, "path": path["name"]}
    mon = Monitor(device)
    post = Monitor(device)
    for _, param in cell.params:
        for t in (param, param.grad):
            if isinstance(t, DTensor):
                mon.known.add(_ptr(t.to_local()))
    for t in cell.built_inputs():
        mon.known.add(_ptr(t))
    used_kwargs: set = set()
    t0 = time.perf_counter()
    set_collective_timeout(meshes["groups"], timedelta(seconds=float(job["collectiveTimeoutS"])))
    issued = c10d_counts(meshes["groups"])
    try:
        try:
            with mon:
                ret = call_steps(path, cell, targets, calls[0], used_kwargs)
        finally:
            count_unseen(mon, meshes["groups"], issued)
        timings["call"] = time.perf_counter() - t0
        norm = path.get("norm", "return")
        if isinstance(norm, dict):
            ret = cell.results[norm["result"]]
        # Outside the target's monitor (what the caller does with the returned norm: torchtitan's own
        # full_tensor()), but counted for the harness's in-step check: it is a collective too.
        if isinstance(ret, DTensor):
            with post:
                ret = ret.full_tensor()
        if isinstance(ret, torch.Tensor):
            result["normDtype"] = str(ret.dtype).replace("torch.", "")
            value = float(ret.reshape(-1)[0].item()) if ret.numel() == 1 else float("nan")
            if ret.numel() != 1:
                raise TypeError(f"the clip returned a tensor of {ret.numel()} elements, not a norm")
        elif ret is None:
            raise TypeError("the clip returned None, not a norm")
        else:
            value = float(ret)
        result["norm"] = num(value)
        del ret
    except Exception as e:  # noqa: BLE001 - the target's exception is the result
        timings.setdefault("call", time.perf_counter() - t0)
        result["error"] = {
            "type": type(e).__name__,
            "message": (str(e).strip().split("\n")[0] or repr(e))[:2000],
            "traceback": traceback.format_exc().strip().split("\n")[-12:],
        }
    finally:
        set_collective_timeout(meshes["groups"], c10d.default_pg_timeout)
    cell.results.clear()
    calls.clear()
    # Tensors die with their last reference; an exception's frames or a collective's output still held by a
    # background thread for a moment can delay that: settle before calling what is left a leak. The collection
    # is cheap because everything that lived before the job is frozen (serve).
    t0 = time.perf_counter()
    for i in range(20):
        if mon.live_bytes() == 0:
            break
        gc.collect()
        if mon.live_bytes() == 0:
            break
        time.sleep(0.005 * (i + 1))
    timings["settle"] = time.perf_counter() - t0
    result["comm"] = mon.record()
    result["groupCalls"] = group_calls(mon, post)
    result["memory"] = {
        "scratchPeakBytes": int(mon.peak),
        "leakedBytes": int(mon.live_bytes()),
        "method": "torch.cuda.max_memory_allocated" if device.type == "cuda" else "dispatch-mode storage tracking",
    }
    result["kwargs"] = sorted(used_kwargs)
    if result["error"] is None:
        t0 = time.perf_counter()
        if cell.after_call():
            timings["writeBack"] = time.perf_counter() - t0
    out = cell.clipped()
    result["gradsMissing"] = cell.missing(out)
    t0 = time.perf_counter()
    if not st_io.write_back(mapped, out):
        st_io.save(job["grads"], out)  # a new file: what the target returned, whatever its dtype or shape
    out.clear()
    timings["save"] = time.perf_counter() - t0
    cell.close()
    result["timings"] = timings
    return result


# ---- the session loop ---------------------------------------------------------------------------------


class MeshCache:
    """The meshes of every layout this session has served, kept for its whole life. DTensor caches sharding
    decisions (and the redistribution plans built from them) by mesh *value*, not identity, and the first
    decision for a foreach op over a many-dimensional mesh costs seconds: a mesh destroyed and built again
    for the same layout would be served cached specs that name its destroyed process groups ("Could not
    resolve the process group"). So meshes are never destroyed while the session lives; when a cell leaves a
    group out of step (the harness sees it in `groupCalls`), the harness ends the session instead."""

    def __init__(self):
        self.meshes: dict = {}
        self.build_seconds = 0.0

    def get(self, layout: dict, device_type: str) -> dict:
        key = json.dumps(layout, sort_keys=True)
        self.build_seconds = 0.0
        if key not in self.meshes:
            t0 = time.perf_counter()
            self.meshes[key] = build_meshes(layout, device_type)
            self.build_seconds = time.perf_counter() - t0
        return self.meshes[key]


def group_calls(*monitors) -> dict:
    """Collectives issued per group (ranks "0,2") during the job, the target's and the adapter's own: the
    harness checks that every member of a group issued as many (protocol.ts)."""
    out: dict = {}
    for mon in monitors:
        for c in mon.calls:
            out[c["group"]] = out.get(c["group"], 0) + 1
    return out


class SessionGone(Exception):
    """The harness ended the session (its directory is gone) or torchrun died: this rank must exit."""


def wait_for(path: str, session: str, parent: int) -> None:
    """Polls for the next job file. At most 2 ms between polls: a job waits half that on average (a longer
    back-off, 10 ms, cost every cell about 5 ms), and a stat every 2 ms is nothing beside a cell."""
    delay = 0.0005
    polls = 0
    while not os.path.exists(path):
        time.sleep(delay)
        delay = min(delay * 1.5, 0.002)
        polls += 1
        # torchrun starts each rank in its own session, so killing torchrun's process group leaves the ranks:
        # a rank notices that its parent or the session directory is gone, and exits.
        if polls % 100 == 0 and (os.getppid() != parent or not os.path.isdir(session)):
            raise SessionGone(session)


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this rank when torchrun dies (torchrun puts each rank in a session of its own)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(0)
    except Exception:  # noqa: BLE001 - not Linux: the polling in wait_for still notices
        pass


def adapter_error(rank: int, e: Exception) -> dict:
    return {
        "protocol": PROTOCOL_VERSION,
        "rank": rank,
        "norm": None,
        "path": None,
        "error": {"type": type(e).__name__, "message": f"adapter: {e}", "traceback": traceback.format_exc().strip().split("\n")[-12:]},
        "adapterError": True,
    }


def serve(session: str) -> None:
    parent = os.getppid()
    _die_with_parent(parent)
    # A rank stuck in a collective gives up after this long (the harness has ended the session by then).
    c10d.default_pg_timeout = timedelta(seconds=float(os.environ.get("CLIP_PARITY_TORCH_PG_TIMEOUT_S", "600")))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world and os.environ.get("CLIP_PARITY_TORCH_DEVICE", "") != "cpu"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device, timeout=c10d.default_pg_timeout)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=c10d.default_pg_timeout)
    rank = dist.get_rank()
    # The adapter's own group: never handed to a target, so a target that left the default group out of
    # step cannot confuse the adapter's goodbye.
    control = dist.new_group(backend="gloo")
    # A full collection walks every object torch's import made (about 0.2 s); frozen, they are skipped, and
    # the collections each job needs see only what the job made.
    gc.collect()
    gc.freeze()
    write_json(
        os.path.join(session, f"ready-{rank}.json"),
        {"protocol": PROTOCOL_VERSION, "rank": rank, "pid": os.getpid(), "torch": torch.__version__.split("+")[0], "backend": dist.get_backend(), "device": str(device)},
    )
    cache = MeshCache()
    targets = Targets()
    n = 0
    while True:
        job_dir = os.path.join(session, f"job-{n}")
        path = os.path.join(job_dir, f"job-{rank}.json")
        try:
            wait_for(path, session, parent)
        except SessionGone:
            os._exit(0)
        with open(path) as f:
            job = json.load(f)
        t0 = time.perf_counter()
        try:
            check_job(job)
            if job["kind"] == "quit":
                break
            meshes = cache.get(job["layout"], device.type)
            result = run_job(job, device, meshes, targets)
            result["timings"]["meshes"] = cache.build_seconds
        except Exception as e:  # noqa: BLE001 - an adapter-side failure (bad job, mesh build...)
            result = adapter_error(rank, e)
        result.setdefault("timings", {})
        result["timings"]["total"] = time.perf_counter() - t0
        if "result" in job:
            write_json(job["result"], result)
        # What the job made and still holds (sharding caches, a receiver) lives on: freeze it too.
        gc.freeze()
        n += 1
    dist.barrier(group=control)
    dist.destroy_process_group()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "serve":
        serve(argv[1])
        return 0
    print("usage: adapter.py serve SESSION_DIR   (under torchrun)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

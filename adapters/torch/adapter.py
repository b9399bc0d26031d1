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
import support  # noqa: E402 - one module per framework (adapters/torch/support/__init__.py)
from support import JobError  # noqa: E402

# Mirrors PROTOCOL_VERSION in harness/external/torch/protocol.ts (suites/torch/protocol.test.ts checks it).
PROTOCOL_VERSION = 4

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
DENSE_AXES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
SPARSE_AXES = ("pp", "dp_replicate", "efsdp", "ep")


# What the adapter writes its results and reads /proc with, bound when it loads, before any target's code: a
# target that patches json, open or os for its whole process does not reach what the adapter reports.
_ENCODE = json.JSONEncoder(allow_nan=False).encode
_OPEN = open
_REPLACE = os.replace
_GETPID = os.getpid


def write_json(path: str, obj: object) -> None:
    text = _ENCODE(obj)
    tmp = f"{path}.tmp-{_GETPID()}"
    with _OPEN(tmp, "w") as f:
        f.write(text)
    _REPLACE(tmp, path)


class _SealedModule(type(sys)):
    """A module whose names cannot be rebound: the adapter's own and st_io's, sealed before any target loads,
    so that a target cannot swap what measures it or writes its result (`__main__.count_unseen = ...`)."""

    def __setattr__(self, name, value):
        raise AttributeError(f"clip-parity's adapter module {self.__name__} is sealed: {name} cannot be replaced")

    def __delattr__(self, name):
        raise AttributeError(f"clip-parity's adapter module {self.__name__} is sealed: {name} cannot be removed")


def seal_adapter_modules() -> None:
    for module in (sys.modules[__name__], st_io):
        module.__class__ = _SealedModule


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


def process_groups(meshes_groups: list) -> list:
    """Every process group of this process: the meshes' and every group a target made itself (DeepSpeed and
    Megatron build their own; a target may build one inside its call), from c10d's own registry, so that a
    collective on any of them is counted, not only those on groups the adapter handed out."""
    seen = {id(g): g for g in meshes_groups}
    try:
        for g in list(c10d._world.pg_map.keys()):
            seen.setdefault(id(g), g)
    except Exception:  # noqa: BLE001 - a torch without the registry: the meshes' groups only
        pass
    return list(seen.values())


def count_unseen(mon: "Monitor", meshes_groups: list, before: dict) -> None:
    """Adds to the Monitor's calls the collectives the groups' backends started during the call beyond those
    the Monitor saw, so that the harness counts what ran, not what a dispatch mode was shown. Each collective
    advances exactly one group's sequence number, so the totals compare (groups with the same ranks too);
    an unseen one is named by a group that ran more than the Monitor saw on its ranks. A group made during
    the call started at 0."""
    after = c10d_counts(process_groups(meshes_groups))
    ran = {key: n - before.get(key, (g, 0))[1] for key, (g, n) in after.items()}
    unseen = sum(ran.values()) - len(mon.calls)
    if unseen <= 0:
        return
    named = []
    for key, n in ran.items():
        ranks = ",".join(str(r) for r in sorted(dist.get_process_group_ranks(after[key][0])))
        named += [ranks] * max(0, n - sum(1 for c in mon.calls if c["group"] == ranks))
    for i in range(unseen):
        group = named[i] if i < len(named) else "?"
        mon.calls.append({"op": "c10d collective unseen by the dispatch monitor", "kind": "other", "group": group, "bytes": 0})


try:
    from torch.distributed.tensor.debug._comm_mode import c10d_collective_ops as _C10D_OPS
except Exception:  # noqa: BLE001 - older/newer torch: fall back to the registry only
    _C10D_OPS = set()


# ---- one cell -------------------------------------------------------------------------------------------


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


def build_meshes(layout: dict, device_type: str, plan: dict | None = None) -> dict:
    """The dense mesh (pp, dp_replicate, dp_shard, cp, tp) and the sparse mesh (pp, dp_replicate, efsdp, ep)
    over the same ranks, row-major (SPEC section 3); each parameter lives on its stage's sub-mesh (without pp),
    trimmed to the axes of mesh_axes(). With a framework's plan (support module MESHES), a mesh is built as the
    framework builds it: its dimension names, several layout axes folded into one dimension where it folds
    them (torchtitan's fsdp = dp_shard x cp), the dimensions of size 1 dropped; the harness's own meshes are
    built too (under "harness"), since the cell's gradients arrive as their local blocks."""
    world = dist.get_world_size()
    axes = mesh_axes(layout)
    sizes = axes["sizes"]
    ranks = torch.arange(world)
    out: dict = {"axes": axes, "pp": None, "plan": {}}
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
    for name, dims in (plan or {}).items():
        # each dimension's layout axes are adjacent in the harness's row-major order, so folding them keeps the ranks
        all_axes = DENSE_AXES if name == "dense" else SPARSE_AXES
        order = [a for _, held in dims for a in held]
        if order != [a for a in all_axes if a in order]:
            raise JobError(f"support plan for the {name} mesh folds {order}, not in the mesh's order {list(all_axes)}")
        kept = [(d, held) for d, held in dims if math.prod(sizes[a] for a in held) > 1]
        if not kept:
            continue  # every dimension of size 1: the framework builds no such mesh (plain tensors, or the dense one)
        dim_sizes = [sizes["pp"]] + [math.prod(sizes[a] for a in held) for _, held in kept]
        m = DeviceMesh(device_type, ranks.reshape(dim_sizes), mesh_dim_names=("pp", *[d for d, _ in kept]))
        full[f"plan-{name}"] = m
        out["plan"][name] = (m[tuple(d for d, _ in kept)], kept)
    if out["plan"]:
        # one group per pipeline stage (every rank creates every group, as new_group requires)
        stages = ranks.reshape(sizes["pp"], -1).tolist()
        groups_by_stage = [dist.new_group(r) for r in stages]
        out["stage_group"] = groups_by_stage[dist.get_rank() // len(stages[0])]
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
        if hasattr(dist, "set_timeout"):
            dist.set_timeout(timeout, g)
        elif hasattr(g, "set_timeout"):  # torch 2.9 and 2.10 (a pinned older release): the group's own setter
            g.set_timeout(timeout)
        else:  # torch 2.8 and older: each backend of the group
            for device in g._device_types:
                g._get_backend(device)._set_default_timeout(timeout)


def param_mesh(p: dict, job: dict, meshes: dict):
    """((mesh, placements) on the harness's mesh, (mesh, placements) on the framework's or None) of one physical
    copy. Experts stay on the sparse mesh unless the convention says
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
    harness = (meshes[name], [placement(by_axis[a]) for a in keep])
    if name not in meshes["plan"]:
        return harness, None
    mesh, kept = meshes["plan"][name]
    sizes, pls = axes["sizes"], []
    for d, held in kept:
        kinds = {json.dumps(by_axis.get(a, {"kind": "replicate"}), sort_keys=True) for a in held if sizes[a] > 1}
        if len(kinds) > 1:
            raise JobError(f"{p['fqn']}: the framework's mesh dimension {d} folds {list(held)}, on which the parameter is placed differently ({sorted(kinds)})")
        pls.append(placement(json.loads(kinds.pop())) if kinds else Replicate())
    return harness, (mesh, pls)


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


UNSET = object()

# The argument sources Cell.arg builds itself; every other name of protocol.ts ARG_SOURCES is a support module's
# (support.all_sources). suites/torch/support.test.ts holds the two together to ARG_SOURCES.
CORE_SOURCES = (
    "params", "model", "grads", "local_params", "grads_for_norm", "local_grads", "max_norm", "norm_type",
    "error_if_nonfinite", "foreach", "pp_mesh", "world_group", "ep_enabled", "experts_present", "dist_backend",
)


class Cell:
    """One job's objects on this rank, built lazily: only what the convention asks for.

    The parameters are what the framework's users hold: plain tensors on one rank (no user builds a mesh for
    one process: torchtitan wraps nothing when no parallelism is enabled, transformers' initialize_distributed_mesh
    returns no mesh, a single-process accelerate or torch loop has none); otherwise DTensors on the framework's
    meshes (support module MESHES) or, without a plan, the harness's. A parameter whose local block on the
    framework's mesh differs from the cell's (torch.chunk over a folded dimension splits unevenly otherwise)
    gets its block from the full gradient, and write_back copies the clipped values into the cell's block."""

    def __init__(self, job: dict, device: torch.device, meshes: dict, grads: dict):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        self.job = job
        self.device = device
        self.meshes = meshes
        self.dtype = DTYPES[job["dtype"]]
        self.params: list[tuple[str, torch.nn.Parameter]] = []
        self.local: dict[str, torch.nn.Parameter] | None = None
        self.local_grads: dict[str, torch.Tensor] = {}
        self.cell_grads: dict[str, torch.Tensor] = {}  # fqn -> the cell's own local block (the mapped file)
        self.rechunked: dict[str, tuple] = {}  # fqn -> (harness mesh, placements): block differs on the framework's mesh
        self.results: dict = {}
        self.roots: dict = {}
        plain = job["world"] == 1
        kw_cache: dict = {}
        built = []
        for p in job["params"]:
            (hmesh, hpls), fw = param_mesh(p, job, meshes)
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
                self.cell_grads[p["fqn"]] = g
            key = tuple(shape)
            kw = kw_cache.get(key)
            if kw is None:
                kw = kw_cache[key] = {"run_check": False, "shape": torch.Size(shape), "stride": contiguous_stride(shape)}
            mesh, pls = fw if fw is not None else (hmesh, hpls)
            lshape, offset = local_shape, [int(o) for o in p["block"]["start"]]
            if fw is not None and not plain:
                ls, off = compute_local_shape_and_global_offset(torch.Size(shape), mesh, pls)
                lshape, offset = [int(n) for n in ls], [int(o) for o in off]
            built.append((p, g, kw, hmesh, hpls, mesh, pls, lshape, offset, lshape != local_shape or offset != [int(o) for o in p["block"]["start"]]))
        # Whether any rank's block differs on the framework's mesh: one flag per parameter, agreed by every rank
        # (the full_tensor() that re-chunks one is a collective), outside the target's call.
        # Whether any rank of the stage has a block that differs on the framework's mesh: one flag per parameter,
        # agreed by the stage's ranks (they hold the same parameters; the full_tensor() that re-chunks one is a
        # collective among them), outside the target's call.
        differs = [False] * len(built)
        if not plain and any(x[5] is not x[3] for x in built):
            flags = torch.tensor([int(x[9]) for x in built], dtype=torch.int32, device=device)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=meshes["stage_group"])
            differs = [bool(f) for f in flags.tolist()]
        for (p, g, kw, hmesh, hpls, mesh, pls, lshape, offset, _), rechunk in zip(built, differs):
            if plain:
                # one process: the full tensor is the local block
                param = torch.nn.Parameter(torch.empty(kw["shape"], dtype=self.dtype, device=device))
                if g is not None:
                    param.grad = g
            else:
                # The parameter's values are never read by a clip: uninitialised memory costs nothing to make.
                param = torch.nn.Parameter(DTensor.from_local(torch.empty(lshape, dtype=self.dtype, device=device), mesh, pls, **kw))
                if g is not None:
                    if rechunk:
                        whole = DTensor.from_local(g, hmesh, hpls, **kw).full_tensor()
                        g = whole[tuple(slice(o, o + n) for o, n in zip(offset, lshape))].clone()
                        del whole
                        self.rechunked[p["fqn"]] = (mesh, pls)
                    param.grad = DTensor.from_local(g, mesh, pls, **kw)
            # What model.named_parameters() and a tie map would tell a trainer: its physical name, and (for tied
            # copies such as DeepSeek-V3's MTP embedding replica) that it is not the canonical copy.
            param.clip_parity_fqn = p["fqn"]
            param.clip_parity_name = p["name"]
            param.clip_parity_canonical = bool(p["canonical"])
            self.params.append((p["fqn"], param))
        self.by_fqn = {p["fqn"]: p for p in job["params"]}
        self.param_by_fqn = dict(self.params)

    def local_grad(self, fqn: str) -> torch.Tensor:
        """The cell's own local block of a gradient, which the checks read: where write-backs copy clipped values."""
        return self.cell_grads[fqn]

    def root(self, key: str, build):
        """A framework object built for this cell alone (support modules: FSDP1's root, ZeRO's optimizer), once."""
        if key not in self.roots:
            self.roots[key] = build(self)
        return self.roots[key]

    def local_params(self) -> list:
        """Plain parameters whose .grad is the very local tensor of the DTensor gradient (in-place clipping
        shows on both)."""
        if self.local is None:
            self.local = {}
            for fqn, param in self.params:
                lp = torch.nn.Parameter(torch.empty(self.cell_grads[fqn].shape if fqn in self.cell_grads else [int(n) for n in self.by_fqn[fqn]["block"]["len"]], dtype=self.dtype, device=self.device))
                if param.grad is not None:
                    lp.grad = self.cell_grads[fqn]
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
        if a not in CORE_SOURCES:
            provided = support.all_sources().get(a)
            if provided is None:
                raise JobError(f"unknown argument source {a!r}: neither adapter.py CORE_SOURCES nor a support module provides it")
            return provided[1](self)
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
        raise JobError(f"argument source {a!r} is in CORE_SOURCES but Cell.arg does not build it")

    def built_inputs(self) -> list:
        """Gradient tensors built for the call from the cell's (FSDP1's flat shards, ZeRO's gathered gradients and
        flat partitions, blocks re-chunked for a framework's mesh): inputs of the call, not scratch, for the monitor."""
        rechunked = [self.param_by_fqn[f].grad.to_local() for f in self.rechunked if isinstance(self.param_by_fqn[f].grad, DTensor)]
        return [t for r in self.roots.values() for t in r.inputs()] + rechunked

    def after_call(self) -> bool:
        """Copies what the target clipped in tensors built for it back into the cell's own blocks (FSDP1's flat
        shards, ZeRO's partitions, re-chunked blocks); whether there was any. Only after a call that returned: a
        raise may have left some ranks out of the gathers this takes."""
        for r in self.roots.values():
            r.write_back()
        for fqn, _ in self.rechunked.items():
            p, block = self.param_by_fqn[fqn], self.by_fqn[fqn]["block"]
            if isinstance(p.grad, DTensor):
                whole = p.grad.full_tensor()
                self.cell_grads[fqn].copy_(whole[tuple(slice(s, s + n) for s, n in zip(block["start"], block["len"]))])
        return bool(self.roots or self.rechunked)

    def close(self) -> None:
        """Releases what was built for this cell alone (ZeRO's engine)."""
        for r in self.roots.values():
            r.close()
        self.roots.clear()

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
            if fqn in self.rechunked and g is param.grad:
                g = self.cell_grads[fqn]  # written back by after_call
            local = g.to_local() if isinstance(g, DTensor) else g
            out.append((fqn, local.detach().to("cpu")))
        return out

    def missing(self, clipped: list) -> list:
        """The copies that had a gradient and have none after the call (clipped: what clipped() returned)."""
        have = {fqn for fqn, _ in clipped}
        return [fqn for fqn, p in self.by_fqn.items() if p["hasGrad"] and fqn not in have]


# The argument sources a session-start setup call can take: those that need no cell.
SESSION_SOURCES = {"dist_backend": lambda: dist.get_backend(), "world_group": lambda: dist.group.WORLD}


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

    def session_setup(self, steps: list) -> None:
        """The convention's setup calls at session start, before the ranks say they are ready: a target's one-time
        work (DeepSpeed's init_distributed JIT-builds its CPU comm op, tens of seconds on a fresh machine) is then
        counted in the session's start and its start timeout, never in the first cell's time or deadline. Only
        arguments that need no cell can be given here; a step that needs one runs with the first job instead."""
        for step in steps:
            if step.get("receiver", "none") != "none" or step.get("args") or any(v not in SESSION_SOURCES for v in step.get("kwargs", {}).values()):
                continue
            self.fn(step["target"])(**{k: SESSION_SOURCES[v]() for k, v in step.get("kwargs", {}).items()})
            self.setup_done.add(json.dumps(step, sort_keys=True))

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


class AllocatorPeak:
    """Scratch memory counted at torch's CPU allocator: the profiler's memory events (c10's
    reportMemoryUsage), which sit below the Python dispatch modes. A target that allocates inside
    torch.utils._python_dispatch._disable_current_modes() is invisible to the Monitor's storage tracking
    but not here; the larger of the two peaks is the one judged, as the larger collective count is.
    A target that stops the profiler (torch.autograd._disable_profiler) is told apart, not counted as 0."""

    def __init__(self, device: torch.device):
        self.enabled = device.type == "cpu"
        self.peak = 0
        self.stopped = False
        self._prof = None

    def __enter__(self):
        if self.enabled:
            self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        if self._prof is None:
            return False
        self.stopped = not torch._C._autograd._profiler_enabled()
        try:
            self._prof.__exit__(*exc)
            results = self._prof.profiler.kineto_results if self._prof.profiler is not None else None
        except Exception:  # noqa: BLE001 - a profiler the target stopped has nothing to hand back
            results = None
        if results is None:
            self.stopped = True
            return False
        live = 0
        for e in sorted((e for e in results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()):
            live += e.nbytes()
            self.peak = max(self.peak, live)
        return False


class ResidentPeak:
    """Scratch memory counted by the operating system: the process's resident high-water mark during the call
    (VmHWM, reset before it by writing 5 to /proc/self/clear_refs: the rank process serves cell after cell) less
    the larger of its resident size before the call plus the mapped input shards (their pages become resident
    as the target reads them) and its resident size after the call. What the call still holds when it returns
    (a first call's lazy imports, a framework's caches) is not scratch: leaks are counted apart. Memory no
    allocator sees (numpy, a C extension) counts here. None where Linux's /proc is not there to ask."""

    def __init__(self, mapped_bytes: int):
        self.mapped_bytes = mapped_bytes
        self.before = None
        self.scratch = None

    @staticmethod
    def _status(field: str) -> int:
        with _OPEN("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise OSError(f"/proc/self/status has no {field}")

    def __enter__(self):
        try:
            with _OPEN("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.before = self._status("VmRSS")
        except OSError:
            self.before = None
        return self

    def __exit__(self, *exc):
        if self.before is not None:
            try:
                peak, after = self._status("VmHWM"), self._status("VmRSS")
                self.scratch = max(0, peak - max(self.before + self.mapped_bytes, after))
            except OSError:
                self.scratch = None
        return False


def warm_allocator_profiler(device: torch.device) -> None:
    """The profiler's first start takes seconds: paid once per rank at start-up, not in a target's call."""
    with AllocatorPeak(device):
        torch.ones(1).sum()


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
    alloc = AllocatorPeak(device)
    post = Monitor(device)
    for _, param in cell.params:
        for t in (param, param.grad):
            if isinstance(t, torch.Tensor):
                mon.known.add(_ptr(t.to_local() if isinstance(t, DTensor) else t))
    for t in cell.built_inputs():
        mon.known.add(_ptr(t))
    used_kwargs: set = set()
    t0 = time.perf_counter()
    set_collective_timeout(meshes["groups"], timedelta(seconds=float(job["collectiveTimeoutS"])))
    issued = c10d_counts(process_groups(meshes["groups"]))
    resident = ResidentPeak(os.path.getsize(job["grads"]))
    try:
        try:
            with mon, alloc, resident:
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
        "scratchPeakBytes": int(max(mon.peak, alloc.peak)),
        "leakedBytes": int(mon.live_bytes()),
        "method": "torch.cuda.max_memory_allocated" if device.type == "cuda" else "the larger of dispatch-mode storage tracking and the allocator's profiler events",
    }
    if resident.scratch is not None:
        result["memory"]["osScratchBytes"] = int(resident.scratch)
    if alloc.stopped and result["error"] is None:
        result["error"] = {
            "type": "MonitorStopped",
            "message": "the target stopped torch's profiler during the call (torch.autograd._disable_profiler): its memory cannot be counted",
            "traceback": [],
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

    def get(self, layout: dict, device_type: str, plan: dict | None = None) -> dict:
        key = json.dumps([layout, plan], sort_keys=True)
        self.build_seconds = 0.0
        if key not in self.meshes:
            t0 = time.perf_counter()
            self.meshes[key] = build_meshes(layout, device_type, plan)
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


def take_private_dir(session: str, rank: int) -> str:
    """This rank's private folder, named by a secret only the harness and this rank know: the harness wrote the
    name to rank-R.secret in a session folder nobody may list, and the rank deletes that file before any target
    code loads (serve waits for every rank). Its jobs, its input shards and its results live there, so a
    target finds no other rank's input in a folder it can list or name."""
    secret = os.path.join(session, f"rank-{rank}.secret")
    with open(secret) as f:
        name = f.read().strip()
    os.unlink(secret)
    return os.path.join(session, name)


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
    seal_adapter_modules()
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
    private = take_private_dir(session, rank)
    # The adapter's own group: never handed to a target, so a target that left the default group out of
    # step cannot confuse the adapter's goodbye.
    control = dist.new_group(backend="gloo")
    # No target code loads on any rank before every rank has taken (and deleted) its secret.
    dist.barrier(group=control)
    # A full collection walks every object torch's import made (about 0.2 s); frozen, they are skipped, and
    # the collections each job needs see only what the job made.
    warm_allocator_profiler(device)
    targets = Targets()
    setup_path = os.path.join(session, "setup.json")
    if os.path.exists(setup_path):
        with open(setup_path) as f:
            targets.session_setup(json.load(f))
    gc.collect()
    gc.freeze()
    write_json(
        os.path.join(session, f"ready-{rank}.json"),
        {"protocol": PROTOCOL_VERSION, "rank": rank, "pid": os.getpid(), "torch": torch.__version__.split("+")[0], "backend": dist.get_backend(), "device": str(device)},
    )
    cache = MeshCache()
    n = 0
    while True:
        path = os.path.join(private, f"job-{n}.json")
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
            fw = support.module(support.framework_of(job.get("subject", "")) or "")
            meshes = cache.get(job["layout"], device.type, getattr(fw, "MESHES", None))
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

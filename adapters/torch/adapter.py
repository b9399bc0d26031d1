"""clip-parity's PyTorch adapter: runs a real Python clipping function on DTensor gradients, one cell at a time.

Run by the harness (harness/clip/torch-subject.ts) as

    python -m torch.distributed.run --standalone --nproc-per-node W adapters/torch/adapter.py serve SESSION_DIR

Every rank initialises c10d once (gloo on CPU; NCCL when there is one GPU per rank), writes
SESSION_DIR/ready-R.json and then serves jobs: for job n it waits for SESSION_DIR/job-n/job-R.json (written
last, atomically, by the harness, after the rank's gradients in in-R.safetensors), and for that cell

  1. builds the dense mesh (pp, dp_replicate, dp_shard, cp, tp) and the sparse mesh (pp, dp_replicate, efsdp,
     ep) over the same ranks, row-major (SPEC section 3), and each parameter as a DTensor on its stage's
     sub-mesh (the mesh without pp) with the cell's placements and this rank's own local shard
     (DTensor.from_local with the global shape and stride: uneven shards exactly as the harness planned);
  2. sets each parameter's .grad from the safetensors file (a DTensor with the same placements);
  3. calls the target `module:function` with every physical parameter of the rank, max_norm and norm_type,
     plus error_if_nonfinite, foreach, pp_mesh and ep_enabled when its signature names them (each parameter
     also carries clip_parity_fqn, clip_parity_name and clip_parity_canonical, as named_parameters() and a
     tie map would tell a trainer);
  4. writes the clipped local gradients (out-R.safetensors) and result-R.json: the returned norm (its
     full_tensor() when it is a DTensor), the exception if it raised, the collectives it issued (a
     CommDebugMode that also records bytes and process groups) and its scratch memory (CUDA: the caching
     allocator's peak; CPU: storages created by tensor ops during the call, tracked by the same dispatch
     mode: tracemalloc does not see tensor memory).

A job file {"quit": true} ends the loop. Every job builds fresh meshes and destroys their process groups
afterwards, so a target that raised on some ranks cannot leave a group out of step for the next cell; a
rank that waits forever in a collective is the harness's timeout to catch (it kills the whole session).
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


try:
    from torch.distributed.tensor.debug._comm_mode import c10d_collective_ops as _C10D_OPS
except Exception:  # noqa: BLE001 - older/newer torch: fall back to the registry only
    _C10D_OPS = set()


# ---- one cell -------------------------------------------------------------------------------------------


def placement(p: dict):
    if p["kind"] == "shard":
        return Shard(int(p["dim"]))
    if p["kind"] == "replicate":
        return Replicate()
    if p["kind"] == "partial":
        return Partial()
    raise ValueError(f"unknown placement {p!r}")


def contiguous_stride(shape: list[int]) -> tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(stride))


def load_target(spec: str):
    module, _, fn = spec.partition(":")
    obj = importlib.import_module(module)
    for part in fn.split("."):
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
    return out


def run_job(job: dict, device: torch.device, meshes: dict) -> tuple[dict, list]:
    """Runs one cell on this rank. Returns (result json, [(fqn, clipped local grad)])."""
    rank = dist.get_rank()
    timings = {}
    t0 = time.perf_counter()
    grads, _ = st_io.load(job["grads"])
    timings["load"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    dtype = DTYPES[job["dtype"]]
    params: list[tuple[str, torch.nn.Parameter]] = []
    axes = meshes["axes"]
    for p in job["params"]:
        mesh = meshes[p["mesh"]]
        keep = axes[p["mesh"]]
        # The placements on the axes the mesh keeps (a placement on a size-1 axis changes nothing).
        by_axis = dict(zip(p["meshAxes"], p["placements"]))
        missing = [a for a in keep if a not in by_axis]
        if missing:
            raise RuntimeError(f"{p['fqn']}: mesh axes {p['meshAxes']} lack {missing} of the {p['mesh']} mesh")
        pls = [placement(by_axis[a]) for a in keep]
        shape = [int(s) for s in p["globalShape"]]
        local_shape = [int(s) for s in p["block"]["len"]]
        g = None
        if p["hasGrad"]:
            g = grads.pop(p["fqn"])
            if list(g.shape) != local_shape or g.dtype != dtype:
                raise RuntimeError(f"{p['fqn']}: gradient file holds {g.dtype} {list(g.shape)}, expected {dtype} {local_shape}")
            g = g.to(device)
        kw = {"run_check": False, "shape": torch.Size(shape), "stride": contiguous_stride(shape)}
        param = torch.nn.Parameter(DTensor.from_local(torch.zeros(local_shape, dtype=dtype, device=device), mesh, pls, **kw))
        if g is not None:
            param.grad = DTensor.from_local(g, mesh, pls, **kw)
        # What model.named_parameters() would tell a trainer: its physical name, and (for tied copies such as
        # DeepSeek-V3's MTP embedding replica) that it is not the canonical copy of its logical parameter.
        param.clip_parity_fqn = p["fqn"]
        param.clip_parity_name = p["name"]
        param.clip_parity_canonical = bool(p["canonical"])
        params.append((p["fqn"], param))
    del grads
    timings["params"] = time.perf_counter() - t0

    fn = load_target(job["target"])
    sig = inspect.signature(fn)
    names = set(sig.parameters)
    norm_type = math.inf if job["normType"] == "inf" else float(job["normType"])
    args = [[p for _, p in params], float(job["maxNorm"])]
    kwargs: dict = {}
    if "norm_type" in names:
        kwargs["norm_type"] = norm_type
    else:
        args.append(norm_type)
    if "error_if_nonfinite" in names:
        kwargs["error_if_nonfinite"] = bool(job["errorIfNonfinite"])
    if "foreach" in names and job.get("foreach") is not None:
        kwargs["foreach"] = bool(job["foreach"])
    if "pp_mesh" in names:
        kwargs["pp_mesh"] = meshes["pp"] if job["layout"]["pp"] > 1 else None
    if "ep_enabled" in names:
        # True when the cell has expert parameters (on any rank): the harness always puts them on their own
        # (sparse) mesh (SPEC section 4), which is what torchtitan's ep_enabled means.
        kwargs["ep_enabled"] = bool(job["epEnabled"])

    result: dict = {"rank": rank, "norm": None, "error": None}
    mon = Monitor(device)
    for _, param in params:
        for t in (param, param.grad):
            if isinstance(t, DTensor):
                mon.known.add(_ptr(t.to_local()))
    gc.collect()
    t0 = time.perf_counter()
    try:
        with mon:
            ret = fn(*args, **kwargs)
        timings["call"] = time.perf_counter() - t0
        # Outside the monitor: what the caller does with the returned norm (torchtitan: full_tensor()).
        if isinstance(ret, DTensor):
            ret = ret.full_tensor()
        if isinstance(ret, torch.Tensor):
            result["normDtype"] = str(ret.dtype).replace("torch.", "")
            value = float(ret.item())
        else:
            value = float(ret)
        result["norm"] = num(value)
        del ret
    except Exception as e:  # noqa: BLE001 - the target's exception is the result
        timings["call"] = time.perf_counter() - t0
        result["error"] = {
            "type": type(e).__name__,
            "message": str(e).strip().split("\n")[0][:2000],
            "traceback": traceback.format_exc().strip().split("\n")[-12:],
        }
    # Tensors die with their last reference; an exception's frames, or a collective's output still held by
    # a background thread for a moment, can delay that: settle before calling what is left a leak.
    for _ in range(20):
        gc.collect()
        if mon.live_bytes() == 0:
            break
        time.sleep(0.01)
    result["comm"] = mon.record()
    result["memory"] = {
        "scratchPeakBytes": int(mon.peak),
        "leakedBytes": int(mon.live_bytes()),
        "method": "torch.cuda.max_memory_allocated" if device.type == "cuda" else "dispatch-mode storage tracking",
    }
    result["kwargs"] = sorted(kwargs)

    out = []
    missing = []
    for fqn, param in params:
        g = param.grad
        if g is None:
            if any(p["fqn"] == fqn and p["hasGrad"] for p in job["params"]):
                missing.append(fqn)
            continue
        local = g.to_local() if isinstance(g, DTensor) else g
        out.append((fqn, local.detach().to("cpu")))
    result["gradsMissing"] = missing
    result["timings"] = timings
    return result, out


# ---- the session loop ---------------------------------------------------------------------------------


class MeshCache:
    """The meshes of the last layout, kept across its cells: DTensor caches sharding decisions per mesh, and
    the first decision for a foreach op over a many-dimensional mesh costs seconds. Dropped (process groups
    destroyed) when the layout changes or when any rank raised in a cell."""

    def __init__(self, control):
        self.control = control
        self.key = None
        self.meshes = None
        self.pgs: list = []
        self.build_seconds = 0.0

    def get(self, layout: dict, device_type: str) -> dict:
        key = json.dumps(layout, sort_keys=True)
        if key != self.key:
            self.drop()
            t0 = time.perf_counter()
            before = set(c10d._world.pg_map.keys())
            self.meshes = build_meshes(layout, device_type)
            self.pgs = [pg for pg in c10d._world.pg_map.keys() if pg not in before]
            self.key = key
            self.build_seconds = time.perf_counter() - t0
        else:
            self.build_seconds = 0.0
        return self.meshes

    def drop(self) -> None:
        for pg in self.pgs:
            if pg is self.control:
                continue
            try:
                dist.destroy_process_group(pg)
            except Exception:  # noqa: BLE001
                pass
        self.key, self.meshes, self.pgs = None, None, []


class SessionGone(Exception):
    """The harness ended the session (its directory is gone) or torchrun died: this rank must exit."""


def wait_for(path: str, session: str, parent: int) -> None:
    delay = 0.001
    polls = 0
    while not os.path.exists(path):
        time.sleep(delay)
        delay = min(delay * 1.5, 0.02)
        polls += 1
        # torchrun starts each rank in its own session, so killing torchrun's process group leaves the ranks:
        # a rank notices that its parent or the session directory is gone, and exits.
        if polls % 25 == 0 and (os.getppid() != parent or not os.path.isdir(session)):
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
    # step cannot confuse the adapter's end-of-job handshake.
    control = dist.new_group(backend="gloo")
    write_json(
        os.path.join(session, f"ready-{rank}.json"),
        {"rank": rank, "pid": os.getpid(), "torch": torch.__version__, "backend": dist.get_backend(), "device": str(device)},
    )
    cache = MeshCache(control)
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
        if job.get("quit"):
            break
        t0 = time.perf_counter()
        try:
            meshes = cache.get(job["layout"], device.type)
            result, out = run_job(job, device, meshes)
            result.setdefault("timings", {})["meshes"] = cache.build_seconds
        except Exception as e:  # noqa: BLE001 - an adapter-side failure (bad job, mesh build...)
            result = {
                "rank": rank,
                "norm": None,
                "error": {"type": type(e).__name__, "message": f"adapter: {e}", "traceback": traceback.format_exc().strip().split("\n")[-12:]},
                "adapterError": True,
            }
            out = []
        t1 = time.perf_counter()
        st_io.save(job["out"], out)
        result.setdefault("timings", {})["save"] = time.perf_counter() - t1
        result["timings"]["total"] = time.perf_counter() - t0
        write_json(job["result"], result)
        # Every rank finished the cell (a rank stuck in a collective never gets here: the harness's timeout
        # ends the session). If any rank raised, the meshes' process groups may be out of step: drop them.
        flag = torch.tensor([1 if result.get("error") else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=control)
        if flag.item():
            cache.drop()
        n += 1
    cache.drop()
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

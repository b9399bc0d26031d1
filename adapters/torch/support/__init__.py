"""Framework support for adapters/torch/adapter.py: one module per framework, registered here by name.

A module holds what the adapter needs to present a cell to one framework the way that framework's users
build it, and nothing the harness could derive for every framework alike:

  SOURCES   the argument sources it provides (names of harness/external/torch/protocol.ts ARG_SOURCES), each
            a function of the adapter's Cell; suites/torch/support.test.ts holds the registry to ARG_SOURCES
  MESHES    (optional) the parameter meshes its users get: each mesh dimension's name and the layout axes it
            holds, outer first (torchtitan's `fsdp` holds dp_shard and cp); see adapter.py build_meshes
  a root    (optional) a class that builds the framework's own object over the cell's gradients (FSDP1's
            root FullyShardedDataParallel, DeepSpeed's ZeRO optimizer) with its write_back() into the cell

The framework of a job is the one its subject names (torch:<framework>); torch:<module>:<function> and
frameworks without a module get the adapter's own sources and the harness's meshes.

`clip-parity export` copies a module's text verbatim into a script between its `# ---- support:` markers
(harness/external/torch/export.ts); suites/torch/support.test.ts holds the copy to the file.
"""
from __future__ import annotations

import importlib


class JobError(Exception):
    """A job this adapter cannot run (a protocol mismatch, a malformed job): an adapter error, not the target's."""


# framework name (adapters/torch/frameworks/<name>.json) -> module name in this package
REGISTRY = {
    "torch-fsdp1": "fw_torch_fsdp1",
    "deepspeed": "fw_deepspeed",
    "deepspeed-bf16": "fw_deepspeed",
    "deepspeed-zero": "fw_deepspeed",
    "deepspeed-engine": "fw_deepspeed_engine",
    "torchtitan": "fw_torchtitan",
    "accelerate": "fw_accelerate",
    "transformers": "fw_transformers",
    "torchrec": "fw_torchrec",
}

_loaded: dict = {}


def module(name: str):
    """The support module registered for a framework name, or None (a plain function, or no module)."""
    mod = REGISTRY.get(name)
    if mod is None:
        return None
    if mod not in _loaded:
        _loaded[mod] = importlib.import_module(f"{__name__}.{mod}")
    return _loaded[mod]


def all_sources() -> dict:
    """Every argument source a module provides: name -> (module name, function). Two modules providing one
    name is a defect (the adapter would not know whose to call): refused with both names."""
    out: dict = {}
    for mod in sorted(set(REGISTRY.values())):
        m = module(next(k for k, v in REGISTRY.items() if v == mod))
        for name, fn in getattr(m, "SOURCES", {}).items():
            if name in out and out[name][0] != mod:
                raise JobError(f"argument source {name!r} is provided by support modules {out[name][0]} and {mod}")
            out[name] = (mod, fn)
    return out


def framework_of(subject: str) -> str | None:
    """torch:<framework> -> its name; torch:<module>:<function> -> None."""
    rest = subject[len("torch:"):] if subject.startswith("torch:") else subject
    return None if ":" in rest else rest

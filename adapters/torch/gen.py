"""SPEC section 5's gradient generator for the adapter's side (agree.py regenerates every gradient with it), to show
that an outside tool sees the harness's values.

Every element is a pure function of (seed, step, canonical name, row-major flat index i); all arithmetic is
mod 2^64:

    key   = splitmix64(seed ^ splitmix64(step ^ fnv1a64(name)))
    bits  = splitmix64(key + i)
    q     = (bits >> (64 - m)) - 2^(m-1)          m = 24 (float32), 8 (bfloat16), 11 (float16)
    value = q * 2^(e - m + 1)

The values themselves come from gen_core.generate, the very function `clip-parity export` copies into its standalone
scripts: one text of the generator. This module adds the regime's modes and special value, and generates a large
tensor in chunks of flat indices (each element depends on its index alone, so chunks change no bit).
"""
from __future__ import annotations

import os
import sys

import torch

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_core import generate as generate_values  # noqa: E402

TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def generate(spec: dict, numel: int, chunk: int = 1 << 22) -> torch.Tensor:
    """The full logical gradient of one parameter (flat), in its dtype. `spec` is the harness's GenSpec:
    seed, step, name, dtype, exp, mode (gen|ones|zeros|neg-zeros), optional specialIndex/specialValue."""
    dtype = TORCH_DTYPES[spec["dtype"]]
    if spec["mode"] == "ones":
        out = torch.ones(numel, dtype=dtype)
    elif spec["mode"] == "zeros":
        out = torch.zeros(numel, dtype=dtype)
    elif spec["mode"] == "neg-zeros":
        out = torch.full((numel,), -0.0, dtype=dtype)
    else:
        args = (spec["name"], int(spec["seed"]), int(spec["step"]), spec["dtype"], int(spec["exp"]))
        parts = [generate_values(args[0], min(chunk, numel - start), *args[1:], start=start) for start in range(0, numel, chunk)]
        out = torch.cat(parts) if parts else torch.empty(0, dtype=dtype)
    if spec.get("specialIndex") is not None and numel > 0:
        v = spec["specialValue"]
        out[int(spec["specialIndex"])] = float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf"))
    return out

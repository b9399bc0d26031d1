"""SPEC section 5's gradient generator in Python (numpy), to show that an outside tool sees the harness's values.

Every element is a pure function of (seed, step, canonical name, row-major flat index i); all arithmetic is
mod 2^64:

    key   = splitmix64(seed ^ splitmix64(step ^ fnv1a64(name)))
    bits  = splitmix64(key + i)
    q     = (bits >> (64 - m)) - 2^(m-1)          m = 24 (float32), 8 (bfloat16), 11 (float16)
    value = q * 2^(e - m + 1)
"""
from __future__ import annotations

import numpy as np
import torch

MASK = (1 << 64) - 1
MANTISSA = {"f32": 24, "bf16": 8, "f16": 11}
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


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
        m = MANTISSA[spec["dtype"]]
        key = splitmix64_int((int(spec["seed"]) ^ splitmix64_int(int(spec["step"]) ^ fnv1a64(spec["name"]))) & MASK)
        scale = 2.0 ** (int(spec["exp"]) - m + 1)
        parts = []
        for start in range(0, numel, chunk):
            n = min(chunk, numel - start)
            with np.errstate(over="ignore"):
                i = np.arange(start, start + n, dtype=np.uint64) + np.uint64(key)
            bits = splitmix64(i)
            q = (bits >> np.uint64(64 - m)).astype(np.int64) - (1 << (m - 1))
            parts.append(torch.from_numpy(q.astype(np.float64) * scale).to(dtype))
        out = torch.cat(parts) if parts else torch.empty(0, dtype=dtype)
    if spec.get("specialIndex") is not None and numel > 0:
        v = spec["specialValue"]
        out[int(spec["specialIndex"])] = float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf"))
    return out

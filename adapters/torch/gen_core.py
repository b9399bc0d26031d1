"""SPEC section 5's gradient generator: its one text in this project.

gen.py (the agreement test's regenerator) calls this `generate`, and `clip-parity export` copies the lines between
the two marker comments below, verbatim, into every script it writes (harness/external/torch/export.ts fills
repro_template.py's @@GENERATE@@ with them): the standalone script and the adapter's side are one function.
So the function stays standalone: it uses `np` (numpy) and `torch` and nothing else of this module, and it counts
against the script's 150 lines (suites/torch/generator-agree.test.ts checks all of this).
"""
import numpy as np
import torch

# clip-parity export: generate from here
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
# clip-parity export: generate to here

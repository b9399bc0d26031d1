"""Agreement of the reference clip with PyTorch (suites/torch/agreement.test.ts): one process, one rank.

    python adapters/torch/agree.py JOB.json

For each cell of the job the harness has written every logical parameter's FULL gradient (safetensors, the
native store's generator). For each cell this script
  1. regenerates every gradient with gen.py (SPEC section 5 in numpy) and compares bit for bit;
  2. runs torch.nn.utils.clip_grad_norm_ on the gradients converted to float64 (the norm the exact reference
     must match once rounded to float32);
  3. runs it on the gradients in their own dtype (what the reference's tolerance classes are about), reports
     the norm, the clip coefficient torch scaled by (computed as torch computes it, in the norm's dtype) and
     writes the clipped gradients back (safetensors) for the harness to check against round(g * coef).
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402
import st_io  # noqa: E402


def num(x: float):
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def run_cell(cell: dict) -> dict:
    t0 = time.perf_counter()
    grads, _ = st_io.load(cell["grads"])
    norm_type = math.inf if cell["normType"] == "inf" else float(cell["normType"])
    max_norm = float(cell["maxNorm"])

    mismatches = []
    checked = 0
    for p in cell["params"]:
        if not p["hasGrad"]:
            continue
        g = grads[p["name"]].reshape(-1)
        expected = gen.generate(p["gen"], g.numel())
        checked += g.numel()
        same = g.view(torch.int16 if g.element_size() == 2 else torch.int32) == expected.view(torch.int16 if g.element_size() == 2 else torch.int32)
        if not bool(same.all()):
            i = int((~same).nonzero()[0])
            mismatches.append({"name": p["name"], "index": i, "expected": num(float(expected[i])), "actual": num(float(g[i]))})
    t_gen = time.perf_counter() - t0

    def params_of(dtype):
        ps = []
        for p in cell["params"]:
            t = torch.nn.Parameter(torch.zeros(p["shape"], dtype=dtype))
            if p["hasGrad"]:
                t.grad = grads[p["name"]].to(dtype).clone()
            ps.append((p["name"], t))
        return ps

    p64 = params_of(torch.float64)
    n64 = torch.nn.utils.clip_grad_norm_([t for _, t in p64], max_norm, norm_type=norm_type, error_if_nonfinite=False)
    norm64 = float(n64)
    del p64

    native_dtype = next(iter(grads.values())).dtype if grads else torch.float32
    pn = params_of(native_dtype)
    nn_ = torch.nn.utils.clip_grad_norm_([t for _, t in pn], max_norm, norm_type=norm_type, error_if_nonfinite=False)
    # The coefficient torch scaled by: torch.nn.utils._clip_grads_with_norm_, in the norm's dtype.
    coef = torch.clamp(max_norm / (nn_ + 1e-6), max=1.0)
    st_io.save(cell["out"], [(name, t.grad) for name, t in pn if t.grad is not None])
    return {
        "id": cell["id"],
        "generator": {"elements": checked, "mismatches": mismatches[:5]},
        "float64": {"norm": num(norm64)},
        "native": {"norm": num(float(nn_)), "dtype": str(nn_.dtype).replace("torch.", ""), "coef": num(float(coef)), "coefDtype": str(coef.dtype).replace("torch.", "")},
        "seconds": {"generator": t_gen, "total": time.perf_counter() - t0},
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: agree.py JOB.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    # float32 reductions on CPU depend on how many threads split them: pin it (golden/torch-agreement.json).
    torch.set_num_threads(int(os.environ.get("CLIP_PARITY_AGREE_THREADS", "2")))
    out = {"torch": torch.__version__, "numpy": np.__version__, "threads": torch.get_num_threads(), "cells": [run_cell(c) for c in job["cells"]]}
    tmp = job["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, allow_nan=False)
    os.replace(tmp, job["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

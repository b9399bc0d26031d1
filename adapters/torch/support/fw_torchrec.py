import math

import torch
from torch.distributed.tensor import DTensor, Shard


# ---- support: torchrec (clip-parity adapters/torch/support/fw_torchrec.py, verbatim) -------------------------------
# torchrec's GradientClippingOptimizer (torchrec/optim/clipping.py) as a trainer builds it for global clipping: a
# KeyedOptimizerWrapper over the model's parameters (its torch optimizer inside, SGD(lr=0) here: the clip never
# steps), wrapped with clipping=NORM, max_gradient, norm_type ("inf", the documented string, for the inf-norm),
# enable_global_grad_clip=True and param_to_pgs: each parameter sharded over some mesh dimensions mapped to the
# process groups of those dimensions, as 2D/n-D model parallelism hands it (the docstring: "Mapping of parameters to
# process groups. Used for global gradient clipping in n-D model parallelism case"); a parameter replicated over
# every dimension is left out, which torchrec treats as replicated (its norm is not reduced). On one rank nothing is
# sharded, and step() then takes its local path (torch.nn.utils.clip_grad_norm_).
# On CPU ranks: 1.3.0 (torch 2.8) and 1.5.0 (torch 2.10) import and clip with fbgemm-gpu-cpu of their own version
# and need nothing more here; 1.4.0 cannot run there (its global path calls torch.tensor(0.0, pin_memory=True), which
# needs CUDA; PR #3679 removed it in 1.5.0), and no stand-in is made for it: that would change the code under test.
def param_to_pgs(params):
    """Each DTensor parameter sharded over some mesh dimensions of more than one rank -> those dimensions'
    process groups, outer first; plain and replicated-only parameters are left out."""
    out = {}
    for p in params:
        if not isinstance(p, DTensor):
            continue
        pgs = [p.device_mesh.get_group(d) for d, pl in enumerate(p.placements) if isinstance(pl, Shard) and p.device_mesh.size(d) > 1]
        if pgs:
            out[p] = pgs
    return out


def build_optimizer(named, max_norm, norm_type):
    """GradientClippingOptimizer(KeyedOptimizerWrapper(params, SGD(lr=0)), NORM, max_norm, norm_type, global,
    param_to_pgs) over the (name, parameter) pairs; norm_type math.inf is passed as the string "inf"."""
    from torchrec.optim.clipping import GradientClipping, GradientClippingOptimizer
    from torchrec.optim.keyed import KeyedOptimizerWrapper

    params = dict(named)
    keyed = KeyedOptimizerWrapper(params, lambda ps: torch.optim.SGD(ps, lr=0.0))
    return GradientClippingOptimizer(
        keyed,
        clipping=GradientClipping.NORM,
        max_gradient=float(max_norm),
        norm_type="inf" if norm_type == math.inf else float(norm_type),
        enable_global_grad_clip=True,
        param_to_pgs=param_to_pgs(params.values()),
    )


def torchrec_optimizer(cell):
    norm = math.inf if cell.job["normType"] == "inf" else float(cell.job["normType"])
    return build_optimizer(cell.params, cell.job["maxNorm"], norm)


SOURCES = {
    "torchrec_optimizer": torchrec_optimizer,
}
# ---- end support: torchrec -----------------------------------------------------------------------------------------

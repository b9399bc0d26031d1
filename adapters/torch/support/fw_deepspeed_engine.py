import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate
from . import JobError


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


def deepspeed_engine(cell):
    """ARG_SOURCES.deepspeed_engine: built once per cell, one whole step and the next one's backward before the call."""
    if any(not p.clip_parity_canonical for _, p in cell.params):
        raise JobError("DeepSpeed's engine holds one copy of a tied parameter: the cell has a tied replica")
    return cell.root("deepspeed-engine", lambda c: Bf16Engine(bf16_engine_grads(c.params), c.job["maxNorm"])).engine


SOURCES = {
    "deepspeed_engine": deepspeed_engine,
}

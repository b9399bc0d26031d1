import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard
from . import JobError


# ---- support: deepspeed (clip-parity adapters/torch/support/fw_deepspeed.py, verbatim) -----------------------------
# DeepSpeed (deepspeed, deepspeed-bf16, deepspeed-zero): the Megatron-style mpu Megatron-DeepSpeed hands to
# deepspeed.initialize, the ZeRO stage 1/2 optimizer of an engine built for the cell, and BF16_Optimizer's
# selection of the gradients its norm counts.
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
            if isinstance(p, DTensor):
                names = p.device_mesh.mesh_dim_names
                split = [pl if n == "tp" and isinstance(pl, Shard) else Replicate() for n, pl in zip(names, p.placements)]
                shape, _ = compute_local_shape_and_global_offset(p.shape, p.device_mesh, split)
            else:  # one rank: plain tensors
                split, shape = None, p.shape
            mp = torch.nn.Parameter(torch.empty(shape, dtype=cell.dtype, device=cell.device))
            mp.tensor_model_parallel = split is not None and any(isinstance(pl, Shard) and p.device_mesh.size(d) > 1 for d, pl in enumerate(split))
            if p.grad is not None:  # as every rank holds it once the data-parallel reduction is done
                mp.grad = p.grad.redistribute(p.device_mesh, split).to_local() if split is not None else p.grad.clone()
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
                    if self.split[fqn] is None:
                        self.cell.local_grad(fqn).copy_(clipped)
                        continue
                    d = DTensor.from_local(clipped, p.device_mesh, self.split[fqn], run_check=False, shape=p.shape, stride=p.stride())
                    self.cell.local_grad(fqn).copy_(d.redistribute(p.device_mesh, p.grad.placements).to_local())

    def inputs(self) -> list:
        return [*self.grads, *self.partitions]

    def close(self) -> None:
        self.engine.destroy()
        self.partitions.clear()


def mpu(cell):
    """Built once per layout and kept with its meshes (new_subgroups_by_enumeration: every rank creates every group)."""
    if "mpu" not in cell.meshes:
        cell.meshes["mpu"] = Mpu(cell.job["layout"])
        cell.meshes["groups"].extend(cell.meshes["mpu"].groups.values())
    return cell.meshes["mpu"]


def grads_for_norm_deepspeed(cell):
    """BF16_Optimizer.get_grads_for_norm's selection, with DeepSpeed's own predicates: no pipeline tied replica,
    and a tensor-parallel duplicate only on tensor-parallel rank 0."""
    from deepspeed.runtime.utils import is_model_parallel_parameter
    from deepspeed.utils.bwc import bwc_tensor_model_parallel_rank

    tp_rank = bwc_tensor_model_parallel_rank(mpu=mpu(cell))
    return [lp.grad for lp in cell.local_params() if lp.grad is not None and not lp.ds_pipe_replicated and (tp_rank == 0 or is_model_parallel_parameter(lp))]


def zero_optimizer(cell):
    return cell.root("zero", lambda c: ZeroRoot(c, stage=2)).optimizer


def zero_grad_partitions(cell):
    return cell.root("zero", lambda c: ZeroRoot(c, stage=2)).partitions


SOURCES = {
    "mpu": mpu,
    "grads_for_norm_deepspeed": grads_for_norm_deepspeed,
    "zero_optimizer": zero_optimizer,
    "zero_grad_partitions": zero_grad_partitions,
}
# ---- end support: deepspeed -----------------------------------------------------------------------------

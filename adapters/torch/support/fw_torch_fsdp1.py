import functools  # noqa: F401 - used by the marked text (an export copies it with the script's own imports)
import torch
import torch.distributed as dist
from . import JobError


# ---- support: torch-fsdp1 (clip-parity adapters/torch/support/fw_torch_fsdp1.py, verbatim) -------------------------
# What FSDP1 (FullyShardedDataParallel with flat parameters, use_orig_params=False) holds when a trainer clips
# after backward. Wrapped as trainers wrap it: every transformer block its own FSDP instance, the root holding
# what is left (embeddings, final norm, output), which is what accelerate's FSDP plugin does with
# auto_wrap_policy=TRANSFORMER_BASED_WRAP (accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin:
# functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=model._no_split_modules)) and the
# FSDP1 tutorials and llama-recipes do with transformer_auto_wrap_policy. So each block is one FlatParameter.
class Block(torch.nn.Module):
    """A transformer block of the cell's model: a module at an index of a layer list (layers.3, mtp.0); the
    class transformer_auto_wrap_policy is given, as a trainer gives its model's decoder-layer class."""


def module_tree(names_shapes, dtype, device):
    """An nn.Module tree with the cell's parameters at their canonical FQNs (values never read); returns
    (root, {id(submodule): its FQN prefix})."""
    root, prefix = torch.nn.Module(), {}
    prefix[id(root)] = ""
    for fqn, shape in names_shapes:
        *path, leaf = fqn.split(".")
        m, at = root, ""
        for i, part in enumerate(path):
            at += part + "."
            child = m._modules.get(part)
            if child is None:
                child = Block() if part.isdigit() else torch.nn.Module()
                m.add_module(part, child)
                prefix[id(child)] = at
            m = child
        m.register_parameter(leaf, torch.nn.Parameter(torch.empty(shape, dtype=dtype, device=device)))
    return root, prefix


class Fsdp1Root:
    """One root FSDP1 instance over the cell's module tree, the blocks wrapped by transformer_auto_wrap_policy:
    FULL_SHARD over dp_shard, HYBRID_SHARD over (dp_replicate, dp_shard), NO_SHARD over dp_replicate alone;
    lazily initialised, as the forward pass leaves it; each FlatParameter's .grad the rank's shard of its
    flattened gradients, which is what its reduce-scatter leaves. FSDP1 shards each instance's concatenation of
    parameters, not each one by dim 0 as the cell does, so the cell's full gradients are gathered to build those
    shards (before the monitored call) and write_back() copies the clipped values into the cell's own local
    shards afterwards, for the checks."""

    def __init__(self, cell):
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp._runtime_utils import _lazy_init
        from torch.distributed.fsdp._traversal_utils import _get_fsdp_handles
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        layout = cell.job["layout"]
        beyond = [f"{a}({layout[a]})" for a in ("pp", "cp", "tp", "ep") if layout[a] > 1]
        if beyond:
            raise JobError(f"FSDP1's flat parameters shard over dp_replicate and dp_shard only, the layout has {', '.join(beyond)}")
        if any(not p.clip_parity_canonical for _, p in cell.params):
            raise JobError("FSDP1 holds one copy of a tied parameter: the cell has a tied replica")
        self.cell = cell
        full = {fqn: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad) for fqn, p in cell.params if p.grad is not None}
        module, prefix = module_tree([(fqn, p.shape) for fqn, p in cell.params], cell.dtype, cell.device)
        names = cell.meshes["dense"].mesh_dim_names if cell.meshes.get("dense") is not None else ()
        if "dp_replicate" in names and "dp_shard" in names:
            how = {"sharding_strategy": ShardingStrategy.HYBRID_SHARD, "device_mesh": cell.meshes["dense"]}
        elif "dp_replicate" in names:
            how = {"sharding_strategy": ShardingStrategy.NO_SHARD, "process_group": cell.meshes["dense"].get_group("dp_replicate")}
        elif "dp_shard" in names and cell.meshes["dense"].size() > 1:
            how = {"sharding_strategy": ShardingStrategy.FULL_SHARD, "process_group": cell.meshes["dense"].get_group("dp_shard")}
        else:  # one rank: FSDP1 over the default group of one, NO_SHARD as FSDP picks for a world of one
            how = {"sharding_strategy": ShardingStrategy.NO_SHARD, "process_group": dist.group.WORLD}
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
        self.root = FullyShardedDataParallel(module, use_orig_params=False, sync_module_states=False, device_id=cell.device, auto_wrap_policy=policy, **how)
        # what a trainer's first forward and first clip leave behind, which every later step reuses
        _lazy_init(self.root, self.root)
        self.root._zero_scalar = torch.tensor(0.0, device=cell.device)
        self.handles = _get_fsdp_handles(self.root)
        self.order = []  # per handle: [fqn or None (padding), numel] in its flat order
        for h in self.handles:
            fp = h.flat_param
            infos = iter(fp._param_infos)
            slots = []
            for numel, pad in zip(fp._numels_with_padding, fp._is_padding_mask):
                if pad:
                    slots.append((None, numel))
                else:
                    info = next(infos)
                    slots.append((prefix[id(info.module)] + info.param_name, numel))
            known = [f for f, _ in slots if f is not None]
            unknown = [f for f in known if f not in cell.param_by_fqn]
            if unknown:
                raise JobError(f"FSDP1 flattened parameters the cell does not have: {unknown[:3]}")
            self.order.append(slots)
            pieces = [torch.zeros(n, dtype=cell.dtype, device=cell.device) if f is None or f not in full else full[f].reshape(-1) for f, n in slots]
            flat = torch.cat(pieces)
            if h.uses_sharded_strategy:
                n, r = fp.numel(), h.rank
                flat = torch.nn.functional.pad(flat, (0, n * h.world_size - flat.numel()))[r * n : (r + 1) * n]
            # after backward FSDP1 holds a flat gradient when any of its parameters has one, zeros for the others
            fp.grad = flat.clone() if any(f in full for f in known) else None
        covered = sorted(f for slots in self.order for f, _ in slots if f is not None)
        if covered != sorted(cell.param_by_fqn):
            raise JobError(f"FSDP1's flat parameters hold {len(covered)} of the cell's {len(cell.param_by_fqn)} parameters")

    def inputs(self) -> list:
        return [h.flat_param.grad for h in self.handles if h.flat_param.grad is not None]

    def write_back(self) -> None:
        """The clipped flat gradients into the cell's local shards (each instance's unsharded order, padding skipped)."""
        for h, slots in zip(self.handles, self.order):
            g = h.flat_param.grad
            if g is None:  # the target dropped the flat gradient: so are the cell's copies (the harness reports them missing)
                for f, _ in slots:
                    if f is not None:
                        self.cell.param_by_fqn[f].grad = None
                continue
            if h.uses_sharded_strategy:
                parts = [torch.empty_like(g) for _ in range(h.world_size)]
                dist.all_gather(parts, g.contiguous(), group=h.process_group)
                g = torch.cat(parts)
            offset = 0
            for f, numel in slots:
                if f is not None:
                    p = self.cell.param_by_fqn[f]
                    if p.grad is not None:
                        block = self.cell.by_fqn[f]["block"]
                        part = g[offset : offset + numel].view(p.shape)[tuple(slice(s, s + n) for s, n in zip(block["start"], block["len"]))]
                        self.cell.local_grad(f).copy_(part)
                offset += numel

    def close(self) -> None:
        pass


def fsdp1_module(cell):
    return cell.root("fsdp1", Fsdp1Root).root


SOURCES = {"fsdp1_module": fsdp1_module}
# ---- end support: torch-fsdp1 ---------------------------------------------------------------------------

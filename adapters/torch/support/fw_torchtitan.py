# ---- support: torchtitan --------------------------------------------------------------------------------
# torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh: the dense mesh is
# unflattened from the world as (pp, dp_replicate, fsdp, tp) with fsdp = dp_shard * cp ("Legacy path folds
# dp_shard and cp into fsdp"), the sparse one as (pp, dp_replicate, efsdp, ep) with efsdp = fsdp * tp / ep.
# fully_shard runs over (dp_replicate, fsdp) (HSDP) or fsdp, TP over tp: a parameter is a DTensor on the
# dims of size > 1 of (dp_replicate, fsdp, tp), an expert one of (dp_replicate, efsdp, ep) when ep > 1
# (models/deepseek_v3/parallelize.py builds no expert mesh otherwise: adapters/torch/frameworks/torchtitan.json
# "experts"). With one rank, fsdp_enabled and tp_enabled are false and nothing is wrapped: plain tensors.
MESHES = {
    "dense": [("dp_replicate", ("dp_replicate",)), ("fsdp", ("dp_shard", "cp")), ("tp", ("tp",))],
    "sparse": [("dp_replicate", ("dp_replicate",)), ("efsdp", ("efsdp",)), ("ep", ("ep",))],
}
SOURCES: dict = {}
# ---- end support: torchtitan ----------------------------------------------------------------------------

# ---- support: transformers ------------------------------------------------------------------------------
# transformers 5.23 transformers/distributed/utils.py initialize_distributed_mesh: a dense mesh
# (pp, dp_replicate, fsdp, tp) and an expert mesh (pp, dp_replicate, efsdp, ep), no cp axis (DistributedConfig
# has no cp_size); it returns no mesh at all when every size is 1 (one process: plain tensors). The harness's
# cp ranks are folded into fsdp, as they would be a transformers user's fsdp ranks.
MESHES = {
    "dense": [("dp_replicate", ("dp_replicate",)), ("fsdp", ("dp_shard", "cp")), ("tp", ("tp",))],
    "sparse": [("dp_replicate", ("dp_replicate",)), ("efsdp", ("efsdp",)), ("ep", ("ep",))],
}
SOURCES: dict = {}
# ---- end support: transformers --------------------------------------------------------------------------

# ---- support: accelerate --------------------------------------------------------------------------------
# accelerate 1.16 accelerate/parallelism_config.py ParallelismConfig.build_device_mesh: dims dp_replicate,
# dp_shard, cp, tp (no ep: it builds no expert mesh), then dp_shard and cp flattened into dp_shard_cp
# (dp_shard_cp_dim_names); accelerate/utils/fsdp_utils.py fsdp2_prepare_model shards over
# mesh[fsdp_dim_names] = (dp_replicate, dp_shard_cp) and TP over tp: a parameter is a DTensor on the dims of
# size > 1 of (dp_replicate, dp_shard_cp, tp). One process: no mesh, plain tensors.
MESHES = {
    "dense": [("dp_replicate", ("dp_replicate",)), ("dp_shard_cp", ("dp_shard", "cp")), ("tp", ("tp",))],
}
SOURCES: dict = {}
# ---- end support: accelerate ----------------------------------------------------------------------------

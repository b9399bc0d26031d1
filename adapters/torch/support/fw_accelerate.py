# ---- support: accelerate (clip-parity adapters/torch/support/fw_accelerate.py, verbatim) ---------------------------
# accelerate 1.16 parallelism_config.py ParallelismConfig.build_device_mesh: dp_replicate, dp_shard, cp, tp (no ep), dp_shard
# and cp flattened into dp_shard_cp; utils/fsdp_utils.py fsdp2_prepare_model shards over (dp_replicate, dp_shard_cp); one process: no mesh.
MESHES = {"dense": [("dp_replicate", ("dp_replicate",)), ("dp_shard_cp", ("dp_shard", "cp")), ("tp", ("tp",))]}
# ---- end support: accelerate ---------------------------------------------------------------------------------------

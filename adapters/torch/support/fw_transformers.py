# ---- support: transformers (clip-parity adapters/torch/support/fw_transformers.py, verbatim) -----------------------
# transformers 5.23 distributed/utils.py initialize_distributed_mesh: dense (pp, dp_replicate, fsdp, tp), expert (pp, dp_replicate,
# efsdp, ep), no cp axis (the harness's cp ranks are folded into fsdp); no mesh at all when every size is 1.
MESHES = {"dense": [("dp_replicate", ("dp_replicate",)), ("fsdp", ("dp_shard", "cp")), ("tp", ("tp",))],
          "sparse": [("dp_replicate", ("dp_replicate",)), ("efsdp", ("efsdp",)), ("ep", ("ep",))]}
# ---- end support: transformers -------------------------------------------------------------------------------------

# ---- support: torchtitan (clip-parity adapters/torch/support/fw_torchtitan.py, verbatim) ---------------------------
# torchtitan 0.3.0 distributed/parallel_dims.py ParallelDims.build_mesh: dense (pp, dp_replicate, fsdp = dp_shard * cp, tp),
# sparse (pp, dp_replicate, efsdp, ep) built when ep > 1; FSDP over (dp_replicate, fsdp), TP over tp; one rank: no wrapping.
MESHES = {"dense": [("dp_replicate", ("dp_replicate",)), ("fsdp", ("dp_shard", "cp")), ("tp", ("tp",))],
          "sparse": [("dp_replicate", ("dp_replicate",)), ("efsdp", ("efsdp",)), ("ep", ("ep",))]}
# ---- end support: torchtitan ---------------------------------------------------------------------------------------

"""DeepSpeed bf16: a step with no gradient on a rank raises in BF16_Optimizer.step, and under PP the other stages hang.

What this script does: it trains a small bf16 MLP through DeepSpeed's own entry points, as a user's loop does:
deepspeed.initialize, then engine.backward + engine.step (no PP), or PipelineEngine.train_batch (--pp). Before
the step it freezes every parameter of the last stage (requires_grad_(False) after initialize, as a fine-tuning
recipe freezes the head). The optimizer is the one DeepSpeed picks for these configs: BF16_Optimizer (bf16 with
ZeRO stage 1 and float32 gradient accumulation without PP; bf16 with PP at stage 0).

BF16_Optimizer.step skips every parameter without a gradient (get_grads_for_norm), so a rank whose parameters
all are frozen hands get_global_norm_of_tensors an empty list, and torch.stack([]) raises "stack expects a
non-empty TensorList" before the all_reduce over the model-parallel group. Without PP every rank raises. With
PP the frozen stage raises and the other stages wait in that all_reduce: the job hangs (on NCCL until the
watchdog's timeout). torch.nn.utils.clip_grad_norm_ over no gradients returns 0 instead.

Run (CPU ranks, gloo; torch and deepspeed only):
    torchrun --standalone --nproc-per-node 2 deepspeed_frozen_stage.py
    torchrun --standalone --nproc-per-node 2 deepspeed_frozen_stage.py --pp
    torchrun --standalone --nproc-per-node 2 deepspeed_frozen_stage.py --pp --freeze-none   # the control
Each rank prints one line: "rank R (...): step returned, norm N", "... step raised <error>", or, where it is
still in the step after --hang-after-s seconds, "... hang: ..." with the functions it waits in. A rank that raised
stays alive for that long before it exits, as a trainer that catches the error (to log it, to save a checkpoint)
does: were it to exit at once, the launcher would tear the job down and a peer's wait would read as a lost
connection instead of the hang it is.
"""

import argparse
import os
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

WIDTH = 8


def say(line: str) -> None:
    """One write per line: torchrun merges the ranks' output, and print's separate newline lets lines run together."""
    os.write(1, (line + "\n").encode())


def report_hang_after(tag: str, seconds: float) -> threading.Timer:
    """After `seconds`, print where the main thread waits (its DeepSpeed and c10d frames) and end the process."""
    main = threading.main_thread().ident

    def fire() -> None:
        frames = traceback.extract_stack(sys._current_frames()[main])
        runtime = [f"{os.path.basename(f.filename)}:{f.name}" for f in frames if f"deepspeed{os.sep}runtime" in f.filename]
        c10d = [f"c10d.{f.name}" for f in frames if "distributed_c10d" in f.filename]
        say(f"{tag}: hang: still in the step after {seconds:g} s, waiting in {' > '.join(runtime[-2:] + c10d[-1:])}")
        os._exit(2)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pp", action="store_true", help="one pipeline stage per rank (PipelineEngine.train_batch)")
    parser.add_argument("--freeze-none", action="store_true", help="the control: freeze nothing, so every rank has gradients and the step returns a norm")
    parser.add_argument("--hang-after-s", type=float, default=60.0, help="seconds a rank may wait in the step before it is reported hung")
    args = parser.parse_args()

    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "gradient_clipping": 1.0,
        "steps_per_print": 2**31 - 1,
    }
    if args.pp:
        from deepspeed.pipe import PipelineModule

        layers = [torch.nn.Linear(WIDTH, WIDTH) for _ in range(2 * world)]
        model = PipelineModule(layers=layers, num_stages=world, loss_fn=lambda out, label: out.float().pow(2).mean())
        config["zero_optimization"] = {"stage": 0}
    else:
        model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, WIDTH))
        config["zero_optimization"] = {"stage": 1}
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    tag = f"rank {rank} ({'stage ' + str(engine.stage_id) if args.pp else 'no PP'}, {type(engine.optimizer).__name__})"

    last_stage = engine.is_last_stage() if args.pp else True
    if last_stage and not args.freeze_none:
        for p in engine.module.parameters():
            p.requires_grad_(False)

    # A rank that is still in the step after this long is waiting for a peer that will never come.
    watchdog = report_hang_after(tag, args.hang_after_s)
    try:
        if args.pp:
            batch = (torch.randn(1, WIDTH, dtype=torch.bfloat16), torch.zeros(1))
            engine.train_batch(data_iter=iter([batch]))
        else:
            x = torch.randn(1, WIDTH, dtype=torch.bfloat16, requires_grad=True)
            engine.backward(engine(x).float().pow(2).mean())
            engine.step()
    except Exception as e:  # the finding: report it as the rank's one line
        watchdog.cancel()
        say(f"{tag}: step raised {type(e).__name__}: {str(e).splitlines()[0]}")
        time.sleep(args.hang_after_s + 5)  # alive, as a trainer that catches the error is, while its peers wait
        os._exit(1)  # no destroy_process_group: a peer may be waiting in a collective
    watchdog.cancel()
    say(f"{tag}: step returned, norm {engine.get_global_grad_norm()}")
    dist.barrier()  # no rank tears its connections down while a peer still uses them
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())

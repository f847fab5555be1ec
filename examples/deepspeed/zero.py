#!/usr/bin/env python3
"""A tiny Llama-architecture causal LM under DeepSpeed ZeRO stage 1, 2 or 3, on weft.

    deepspeed --num_gpus 2 examples/deepspeed/zero.py --stage 3 --backend weft --out weft.json
    deepspeed --num_gpus 8 examples/deepspeed/zero.py --stage 3 --device cuda

DeepSpeed asks its accelerator for a backend name ("nccl" on CUDA, "gloo" on a CPU without oneCCL); the
supported way to choose another is to name it to `deepspeed.init_distributed(dist_backend="weft")` before
`deepspeed.initialize` (which then finds the group made). On a CPU set DS_ACCELERATOR=cpu. Each step trains
one global batch, each rank its slice; the optimizer is torch's AdamW, handed to DeepSpeed as a client
optimizer.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import stacks  # noqa: E402


def config(args, world):
    cfg = {
        "train_batch_size": args.global_batch,
        "train_micro_batch_size_per_gpu": args.global_batch // world,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": args.stage},
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": args.device == "cuda"},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if args.load_universal:
        # load_checkpoint then reads the tag in --load's latest_universal and splits each parameter's whole
        # fp32 weights and Adam moments across this world, whatever the world that saved them.
        cfg["checkpoint"] = {"load_universal": True}
    return cfg


def full_state(engine, stage):
    """The whole model's parameters on rank 0 (ZeRO-3 gathers each shard first)."""
    import deepspeed
    params = dict(engine.module.named_parameters())
    if stage == 3:
        with deepspeed.zero.GatheredParameters(list(params.values()), modifier_rank=None):
            return {k: v.detach().float().cpu().clone() for k, v in params.items()}
    return {k: v.detach().float().cpu().clone() for k, v in params.items()}


def local_param_bytes(engine, stage):
    if stage == 3:  # each parameter's own shard (ds_tensor); the full tensor is gathered only around its use
        return sum(p.ds_tensor.numel() * p.ds_tensor.element_size() for p in engine.module.parameters())
    return stacks.model_bytes(engine.module)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    stacks.add_args(ap, steps=6, global_batch=8, lr=1e-3)
    ap.add_argument("--stage", type=int, default=3, choices=(1, 2, 3))
    ap.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    ap.add_argument("--load-universal", action="store_true",
                    help="--load holds DeepSpeed's universal checkpoint (python -m "
                    "deepspeed.checkpoint.ds_to_universal run on a saved one), loadable at any world size")
    args = ap.parse_args()
    if args.load_universal and not args.load:
        raise SystemExit("--load-universal needs --load DIR (the folder holding latest_universal)")
    import deepspeed
    _, world, _ = stacks.start(args, deepspeed.init_distributed)  # <- "weft": the one weft line

    model = stacks.tiny_llama(args.seed)
    full_bytes = stacks.model_bytes(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=config(args, world))
    first = 0
    if args.load:
        _, client = engine.load_checkpoint(args.load)
        first = client["step"]

    report = stacks.Report(args, first_step=first)
    mine = stacks.rank_slice(args)
    for step in range(first, args.steps):
        with report.step(step) as s:
            ids = stacks.lm_batch(step, args.global_batch)[mine].to(engine.device)
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
            s.loss = stacks.global_mean(loss)
        if report.wants_save(step):
            engine.save_checkpoint(args.save, client_state={"step": step + 1})

    stacks.finish(args, report, full_state(engine, args.stage),
                  param_bytes_per_rank=local_param_bytes(engine, args.stage), model_bytes=full_bytes)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A tiny Llama-architecture causal LM (a small LlamaConfig, no weights downloaded) under HF Accelerate, on weft.

    accelerate launch --multi_gpu --num_processes 2 examples/accelerate/llama.py --backend weft --out weft.json
    accelerate launch --multi_gpu --num_processes 8 examples/accelerate/llama.py --device cuda --mode fsdp

How Accelerate is told to use weft:
- CUDA: `Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="weft")])`; Accelerate keeps a backend
  it is given for GPUs and makes the group with it.
- CPU: Accelerate replaces any backend it is given by "gloo" for CPU processes (and raises when the two
  differ), so the group is made first, `dist.init_process_group("weft")`, and Accelerate uses the group it
  finds (it makes one only when none exists).
--mode fsdp uses Accelerate's FSDP2 plugin, which Accelerate enables only for accelerator devices: on a CPU
the script refuses it rather than silently running DDP. Each step trains one global batch, each rank its
slice, with AdamW.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import stacks  # noqa: E402


def make_accelerator(args):
    from accelerate import Accelerator, FullyShardedDataParallelPlugin, InitProcessGroupKwargs
    from accelerate.utils import DistributedType
    fsdp = None
    if args.mode == "fsdp":
        if args.device == "cpu":
            raise SystemExit("--mode fsdp needs --device cuda: Accelerate enables FSDP only for accelerator "
                             "devices (a CPU run would be plain DDP)")
        fsdp = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                              transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
                                              state_dict_type="SHARDED_STATE_DICT")
    if args.device == "cpu":
        dist.init_process_group(args.backend)  # <- "weft" on a CPU: make the group before Accelerate does
        accelerator = Accelerator(cpu=True)
    else:  # <- "weft" on GPUs: Accelerate's own setting
        accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend=args.backend)], fsdp_plugin=fsdp)
    want = DistributedType.FSDP if fsdp else (DistributedType.MULTI_CPU if args.device == "cpu"
                                              else DistributedType.MULTI_GPU)
    if accelerator.num_processes > 1 and accelerator.distributed_type != want:
        raise SystemExit("Accelerate set up %s, not %s" % (accelerator.distributed_type, want))
    return accelerator


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    stacks.add_args(ap, steps=6, global_batch=8, lr=1e-3)
    ap.add_argument("--mode", default="ddp", choices=("ddp", "fsdp"))
    args = ap.parse_args()
    stacks.check_steps(args)
    stacks.register_weft(args.backend)
    accelerator = make_accelerator(args)
    world = accelerator.num_processes
    stacks.check_batch(args, world)

    model = stacks.tiny_llama(args.seed)
    full_bytes = stacks.model_bytes(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, opt = accelerator.prepare(model, opt)
    first = 0
    if args.load:
        accelerator.load_state(args.load)
        with open(os.path.join(args.load, "step.json")) as f:
            first = json.load(f)["step"]

    report = stacks.Report(args, first_step=first)
    mine = stacks.rank_slice(args)
    for step in range(first, args.steps):
        with report.step(step) as s:
            ids = stacks.lm_batch(step, args.global_batch)[mine].to(accelerator.device)
            opt.zero_grad()
            loss = model(input_ids=ids, labels=ids).loss
            accelerator.backward(loss)
            opt.step()
            s.loss = accelerator.reduce(loss.detach().float(), reduction="mean").item()
        if report.wants_save(step):
            accelerator.save_state(args.save)
            if accelerator.is_main_process:
                with open(os.path.join(args.save, "step.json"), "w") as f:
                    json.dump({"step": step + 1}, f)
            accelerator.wait_for_everyone()

    final = stacks.save_final(args, accelerator.get_state_dict(model))  # gathered whole (FSDP too)
    local = sum(p.to_local().numel() * p.element_size() if hasattr(p, "to_local") else p.numel() * p.element_size()
                for p in model.parameters())
    report.write(final_params=final, param_bytes_per_rank=local, model_bytes=full_bytes)
    accelerator.end_training()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

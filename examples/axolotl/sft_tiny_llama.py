#!/usr/bin/env python3
"""Supervised fine-tuning of a tiny Llama-architecture model by Axolotl (its YAML config, dataset loading and
trainer builder; data-parallel through Accelerate's DDP), over weft. Axolotl's trainer targets CUDA GPUs.

    torchrun --nproc_per_node 2 examples/axolotl/sft_tiny_llama.py --device cuda                  # over weft
    torchrun --nproc_per_node 2 examples/axolotl/sft_tiny_llama.py --device cuda --backend gloo   # over gloo
    python examples/axolotl/sft_tiny_llama.py --device cuda                                       # one GPU

Axolotl's config has no backend key (it hands Accelerate the job), and Accelerate adopts a default group that
already exists, so weft is selected by making it first: the one marked line in stack_report.init_first,
`dist.init_process_group("weft")`, before Axolotl starts. The script then does what `axolotl train config.yml`
does (load_cfg, load_datasets, train) on a config it writes: the model (examples/tiny_hf.py) and a completion
dataset of synthetic chats, both in a local folder, so nothing is downloaded. Without a CUDA device, or without
Axolotl, it exits 77 (a skip) saying which.
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stack_report  # noqa: E402  (puts the checkout's python/ on sys.path)
import tiny_hf  # noqa: E402


def write_config(work, args, world):
    model_dir = tiny_hf.write_model(os.path.join(work, "tiny-llama"), args.seed)
    data = os.path.join(work, "chats.jsonl")
    with open(data, "w") as f:
        for text in tiny_hf.chats(args.batch_size * world * args.steps, args.seed):
            f.write(json.dumps({"text": text}) + "\n")
    cfg = {"base_model": model_dir, "tokenizer_type": "PreTrainedTokenizerFast",
           "datasets": [{"path": data, "ds_type": "json", "type": "completion", "field": "text"}],
           "dataset_prepared_path": os.path.join(work, "prepared"), "output_dir": os.path.join(work, "out"),
           "sequence_len": 64, "micro_batch_size": args.batch_size, "gradient_accumulation_steps": 1,
           "max_steps": args.steps, "num_epochs": 1, "learning_rate": args.lr, "optimizer": "adamw_torch",
           "lr_scheduler": "constant", "logging_steps": 1, "seed": args.seed, "bf16": False, "fp16": False,
           "tf32": False, "val_set_size": 0, "save_steps": args.save_at or None,
           "save_strategy": "steps" if args.save_at else "no", "shuffle_merged_datasets": False}
    path = os.path.join(work, "config.json")  # YAML is a superset of JSON: load_cfg reads it as YAML
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    stack_report.add_args(ap, steps=8, batch_size=4, lr=1e-3)
    args = stack_report.parse(ap)
    stack_report.require(["axolotl"], args.device,
                         gpu_only="Axolotl's trainer targets CUDA GPUs (bitsandbytes, its GPU checks)")
    import axolotl
    import torch.distributed as dist
    from axolotl.cli.args import TrainerCliArgs
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_datasets
    from axolotl.train import train

    import weft.torch  # noqa: F401  registers the "weft" backend

    rank, world = stack_report.init_first(args.backend, args.device)
    work = args.checkpoint_dir or tempfile.mkdtemp(prefix="axolotl-")
    config = os.path.join(work, "config.json")
    if rank == 0 and not args.resume:
        write_config(work, args, world)
    dist.barrier()
    overrides = {"auto_resume_from_checkpoints": True} if args.resume else {}  # the latest in output_dir
    cfg = load_cfg(config, **overrides)
    log = stack_report.Log()
    meta = load_datasets(cfg=cfg, cli_args=TrainerCliArgs())
    model, _, trainer = train(cfg=cfg, dataset_meta=meta)
    # Axolotl builds its trainer inside train(): the losses come from the trainer's own log history (no
    # per-step times: step_time_s stays empty).
    log.first_step = args.save_at if args.resume else 0
    log.losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    mine = stack_report.param_bytes(model.parameters())
    per_rank = [None] * world
    dist.all_gather_object(per_rank, mine)
    if rank == 0:
        log.write(args.out, backend=dist.get_backend(), world_size=world, state_dict=model.state_dict(),
                  param_bytes_per_rank=per_rank, param_bytes_full=mine, stack="axolotl",
                  stack_version=getattr(axolotl, "__version__", "unknown"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

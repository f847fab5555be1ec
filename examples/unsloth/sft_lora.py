#!/usr/bin/env python3
"""LoRA supervised fine-tuning of a tiny Llama-architecture model with Unsloth (its FastLanguageModel and
TRL's SFTTrainer, data-parallel through Accelerate's DDP), over weft. Unsloth needs a CUDA GPU.

    torchrun --nproc_per_node 2 examples/unsloth/sft_lora.py --device cuda                  # over weft
    torchrun --nproc_per_node 2 examples/unsloth/sft_lora.py --device cuda --backend gloo   # over gloo
    python examples/unsloth/sft_lora.py --device cuda                                       # one GPU

Accelerate, underneath the trainer, adopts a default group that already exists, so weft is selected by making
it first: the one marked line in stack_report.init_first, `dist.init_process_group("weft")`, before Unsloth
loads the model. The model (examples/tiny_hf.py) is built from a small LlamaConfig and written to a local
folder that Unsloth loads from: nothing is downloaded. Without a CUDA device, or without Unsloth, the script
exits 77 (a skip) saying which.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stack_report  # noqa: E402  (puts the checkout's python/ on sys.path)
import tiny_hf  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    stack_report.add_args(ap, steps=8, batch_size=4, lr=2e-3)
    args = stack_report.parse(ap)
    stack_report.require(["unsloth", "trl", "datasets"], args.device,
                         gpu_only="Unsloth needs a CUDA GPU (its kernels are Triton GPU kernels)")
    import unsloth  # noqa: F401  before transformers and trl: it patches them
    import torch
    import torch.distributed as dist
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    from unsloth import FastLanguageModel

    import weft.torch  # noqa: F401  registers the "weft" backend

    rank, world = stack_report.init_first(args.backend, args.device)
    work = args.checkpoint_dir or tempfile.mkdtemp(prefix="unsloth-")
    model_dir = os.path.join(work, "tiny-llama")
    if rank == 0 and not os.path.isdir(model_dir):
        tiny_hf.write_model(model_dir, args.seed)
    dist.barrier()
    model, tokenizer = FastLanguageModel.from_pretrained(model_name=model_dir, max_seq_length=64,
                                                         dtype=torch.float32, load_in_4bit=False)
    model = FastLanguageModel.get_peft_model(model, r=8, lora_alpha=16, lora_dropout=0.0, random_state=args.seed,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    data = Dataset.from_dict({"text": tiny_hf.chats(args.batch_size * world * args.steps, args.seed)})
    log = stack_report.Log()
    trainer = SFTTrainer(
        model=model, processing_class=tokenizer, train_dataset=data, callbacks=[stack_report.hf_callback(log)],
        args=SFTConfig(output_dir=work, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                       learning_rate=args.lr, lr_scheduler_type="constant", logging_steps=1, report_to=[],
                       seed=args.seed, dataset_text_field="text", max_length=64,
                       save_strategy="steps" if args.save_at else "no", save_steps=max(args.save_at, 1)))
    last = None
    if args.resume:
        last = max((os.path.join(work, d) for d in os.listdir(work) if d.startswith("checkpoint-")),
                   key=lambda d: int(d.rsplit("-", 1)[1]))
    trainer.train(resume_from_checkpoint=last)
    lora = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    mine = stack_report.param_bytes(p for p in model.parameters() if p.requires_grad)
    per_rank = [None] * world
    dist.all_gather_object(per_rank, mine)
    if rank == 0:
        log.write(args.out, backend=dist.get_backend(), world_size=world, state_dict=lora,
                  param_bytes_per_rank=per_rank, param_bytes_full=mine, stack="unsloth",
                  stack_version=unsloth.__version__)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

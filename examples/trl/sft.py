#!/usr/bin/env python3
"""Supervised fine-tuning with TRL's SFTTrainer: a tiny Llama-architecture model (a small LlamaConfig, no
weights downloaded), a tokenizer trained in the script and a small synthetic chat dataset, under DDP
(torchrun) or DeepSpeed ZeRO-3 (the deepspeed launcher), on weft.

    torchrun --standalone --nproc_per_node 2 examples/trl/sft.py --backend weft --out weft.json
    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 examples/trl/sft.py --mode zero3 --backend weft --out weft.json

How TRL (through Transformers' Trainer and Accelerate) is told to use weft:
- DDP on GPUs: `SFTConfig(ddp_backend="weft")` (the Python argument: the command-line parser of
  Transformers lists fixed choices for it, so from a command line use the Python form).
- DDP on a CPU: Accelerate replaces the backend by "gloo" for CPU processes and raises when it was given
  another, so the script makes the group first, `dist.init_process_group("weft")`, and leaves ddp_backend
  unset; the Trainer uses the group it finds.
- ZeRO-3 (GPUs or CPU): `deepspeed.init_distributed(dist_backend="weft")` before the Trainer; DeepSpeed
  then keeps the group. On a CPU set DS_ACCELERATOR=cpu.
Each step is one global batch of --global-batch chats (the Trainer's sampler gives each rank its share).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import stacks  # noqa: E402

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def chats(n, seed):
    """n synthetic arithmetic chats: a user question and the assistant's answer."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        a, b = (int(v) for v in torch.randint(0, 100, (2,), generator=g))
        out.append({"messages": [{"role": "user", "content": "what is %d plus %d?" % (a, b)},
                                 {"role": "assistant", "content": "%d plus %d is %d." % (a, b, a + b)}]})
    return out


def tokenizer_for(texts):
    """A byte-level BPE tokenizer trained on the dataset itself (nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    specials = ["<pad>", "<s>", "<|end|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=256, special_tokens=specials, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="<|end|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


class Record:
    """A TrainerCallback's hooks: each step's wall time and the Trainer's logged (all-rank mean) loss."""

    def __init__(self):
        self.losses, self.times, self._t0 = [], [], None

    def callback(self):
        from transformers import TrainerCallback
        rec = self

        class _Cb(TrainerCallback):
            def on_step_begin(self, a, state, control, **kw):
                rec._t0 = time.perf_counter()

            def on_step_end(self, a, state, control, **kw):
                rec.times.append(time.perf_counter() - rec._t0)

            def on_log(self, a, state, control, logs=None, **kw):
                if logs and "loss" in logs:
                    rec.losses.append(float(logs["loss"]))
        return _Cb()


def own_step_tensors(trainer):
    """A TrainerCallback for a universal ZeRO-3 resume. DeepSpeed 0.19.8's loader
    (DeepSpeedZeroOptimizer_Stage3.load_hp_checkpoint_state_from_checkpoint_dir_stage3) gives every sub-group's
    Adam state one and the same `step` tensor, and torch's AdamW adds 1 to each state's step in place: with the
    Trainer's two parameter groups (decay and no decay: two sub-groups) every step then counts twice in Adam's
    bias correction. A tensor of its own per sub-group, once the checkpoint is loaded (on_train_begin comes
    after the Trainer's resume), keeps one count per step."""
    from transformers import TrainerCallback

    class _Cb(TrainerCallback):
        def on_train_begin(self, a, state, control, **kw):
            for st in trainer.model_wrapped.optimizer.optimizer.state.values():
                if torch.is_tensor(st.get("step")):
                    st["step"] = st["step"].clone()
    return _Cb()


def zero3_config(args):
    # The 16-bit gather on save is what lets the trainer hand back the whole model (get_state_dict).
    cfg = {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True},
           "train_micro_batch_size_per_gpu": "auto",
           "train_batch_size": "auto", "gradient_accumulation_steps": "auto", "zero_allow_untested_optimizer": True,
           "bf16": {"enabled": "auto"}, "communication_data_type": args.comm_dtype}
    if args.load_universal:
        # The Trainer's resume calls the engine's load_checkpoint without a tag: with this set, DeepSpeed reads
        # the checkpoint folder's latest_universal instead of latest, at any world size.
        cfg["checkpoint"] = {"load_universal": True}
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    stacks.add_args(ap, steps=6, global_batch=8, lr=1e-3)
    ap.add_argument("--mode", default="ddp", choices=("ddp", "zero3"))
    ap.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    ap.add_argument("--comm-dtype", default=None, choices=("fp32", "bf16"),
                    help="ZeRO-3: DeepSpeed's communication_data_type for gradients (default: the training dtype, "
                    "bf16); fp32 sums them before any rounding to bf16")
    ap.add_argument("--load-universal", action="store_true",
                    help="ZeRO-3: --load's checkpoint-K folder holds DeepSpeed's universal checkpoint (python -m "
                    "deepspeed.checkpoint.ds_to_universal run on its global_stepK), loadable at any world size")
    args = ap.parse_args()
    if args.load_universal and (args.mode != "zero3" or not args.load):
        raise SystemExit("--load-universal needs --mode zero3 and --load DIR, not --mode %s and --load %s" %
                         (args.mode, args.load))
    stacks.check_steps(args)
    stacks.register_weft(args.backend)
    cpu = args.device == "cpu"
    if args.mode == "zero3":
        import deepspeed
        deepspeed.init_distributed(dist_backend=args.backend)  # <- "weft" under ZeRO-3
    elif cpu:
        dist.init_process_group(args.backend)  # <- "weft" on a CPU: the group first, Accelerate uses it
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    data = chats(args.global_batch * args.steps, args.seed)
    tok = tokenizer_for(["".join(m["content"] for m in c["messages"]) for c in data] + ["plus is what"])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    stacks.check_batch(args, world)
    model = stacks.tiny_llama(args.seed, vocab=len(tok), seq=64)
    out_dir = args.save or os.path.join(os.path.dirname(os.path.abspath(args.out or ".")), "sft-out")
    config = SFTConfig(
        output_dir=out_dir, max_steps=args.steps, per_device_train_batch_size=args.global_batch // world,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, logging_steps=1, seed=args.seed,
        data_seed=args.seed, report_to="none", max_length=64, use_cpu=cpu, dataloader_num_workers=0,
        save_strategy="steps" if args.save else "no", save_steps=stacks.save_step(args), save_only_model=False,
        ddp_backend=None if cpu or args.mode == "zero3" else args.backend,  # <- "weft" on GPUs
        deepspeed=zero3_config(args) if args.mode == "zero3" else None, disable_tqdm=True)
    rec = Record()
    trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(data), processing_class=tok,
                         callbacks=[rec.callback()])
    if args.load_universal:
        trainer.add_callback(own_step_tensors(trainer))
    first = 0
    resume = None
    if args.load:  # the checkpoint the first run wrote after --save-at steps (it also wrote later ones)
        first = stacks.save_step(args)
        resume = os.path.join(args.load, "checkpoint-%d" % first)
        if not os.path.isdir(resume):
            raise SystemExit("--load %s has no %s (was it saved with the same --save-at?)" % (args.load, resume))
    trainer.train(resume_from_checkpoint=resume)

    report = stacks.Report(args, first_step=first)
    report.losses, report.times = rec.losses, rec.times
    final = stacks.save_final(args, trainer.accelerator.get_state_dict(trainer.model_wrapped))
    # In the dtype the stack trains in (ZeRO-3 under TRL: bf16): each rank's shard, and the whole model.
    shard = [(p.ds_tensor.numel(), p.ds_numel, p.ds_tensor.element_size()) if hasattr(p, "ds_tensor")
             else (p.numel(), p.numel(), p.element_size()) for p in trainer.model.parameters()]
    local = sum(n * b for n, _, b in shard)
    full_bytes = sum(n * b for _, n, b in shard)
    report.write(final_params=final, param_bytes_per_rank=local, model_bytes=full_bytes)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

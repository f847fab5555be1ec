#!/usr/bin/env python3
"""A tiny causal language model (a GPT-style decoder: token and position embeddings, pre-norm blocks with
causal self-attention, a linear head) trained with Mosaic Composer's Trainer, parameters sharded by Composer's
FSDP (FSDP2, `fully_shard`), over weft.

    .venv/bin/composer -n 2 examples/composer/causal_lm_fsdp.py                   # CPU, 2 ranks, over weft
    .venv/bin/composer -n 2 examples/composer/causal_lm_fsdp.py --backend gloo    # the same over gloo
    composer -n 8 examples/composer/causal_lm_fsdp.py --device cuda               # a GPU a rank

Composer makes the process group itself from its device's `dist_backend` ('gloo' for DeviceCPU, 'nccl' for
DeviceGPU) and refuses a group of another backend, so the example names weft as a device's backend: the one
marked line, a DeviceCPU (or DeviceGPU) subclass with `dist_backend = "weft"`. `import weft.torch` registers
the backend in every rank Composer's launcher starts. The tokens are synthetic: a fixed random bigram table
drives every sequence, so the model has something to learn and every run sees the same data. Each step trains
one global batch (--global-batch), each rank its 1/N slice, and the sharded checkpoint (torch's DCP) reshards
when it is loaded: a run saved at one world size resumes at another.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stack_report  # noqa: E402  (puts the checkout's python/ on sys.path)

import composer  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from composer import Callback, Event, Trainer  # noqa: E402
from composer.devices import DeviceCPU, DeviceGPU  # noqa: E402
from composer.models import ComposerModel  # noqa: E402
from composer.utils import dist as cdist  # noqa: E402
from composer.utils.parallelism import FSDP2Config  # noqa: E402
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import weft.torch  # noqa: E402,F401  registers the "weft" backend in every rank the launcher starts


def device_for(kind, backend):
    """Composer's device with `backend` as the process group's backend."""
    base = DeviceGPU if kind == "cuda" else DeviceCPU
    return type("Device" + backend.capitalize(), (base,), {"dist_backend": backend})()  # <- weft: "weft"


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        # No biases in attention (as in Llama): a key bias gets no gradient (softmax ignores what it adds to each
        # query's scores alike), so all it would hold is what AdamW makes of rounding noise, which differs with
        # the order the ranks' gradients are summed in, hence with the world size.
        self.attn = nn.MultiheadAttention(dim, heads, bias=False, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self._fsdp_wrap = True  # Composer's FSDP makes each block a unit of its own

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyLM(ComposerModel):
    def __init__(self, vocab, seq, dim, layers, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.blocks._fsdp_wrap = False  # a container has no forward to gather in: its blocks are the units
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), persistent=False)

    def forward(self, batch):
        tokens = batch[0][:, :-1]
        # Every parameter is used through its module's call: FSDP gathers a unit's shards in its forward.
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        mask = self.mask[: tokens.shape[1], : tokens.shape[1]]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))

    def loss(self, logits, batch):
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch[0][:, 1:].flatten())


def sequences(count, vocab, seq, seed):
    """Token sequences from a random bigram table: each token picks its successor among 4 likely ones."""
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab, (vocab, 4), generator=g)
    tokens = torch.empty(count, seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, vocab, (count,), generator=g)
    for t in range(seq):
        pick = torch.randint(0, 4, (count,), generator=g)
        tokens[:, t + 1] = successors[tokens[:, t], pick]
    return TensorDataset(tokens)


class Report(Callback):
    def __init__(self, args):
        self.args = args
        self.log = stack_report.Log()
        self.t0 = 0.0

    def fit_start(self, state, logger):
        self.log.first_step = int(state.timestamp.batch)  # a resumed run goes on from its checkpoint's batch

    def batch_start(self, state, logger):
        self.t0 = time.perf_counter()

    def batch_end(self, state, logger):
        self.log.step(stack_report.global_mean(state.loss), time.perf_counter() - self.t0)

    def fit_end(self, state, logger):
        local = [p.to_local() if hasattr(p, "to_local") else p for p in state.model.parameters()]
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, stack_report.param_bytes(local))
        full = get_model_state_dict(state.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if dist.get_rank() == 0:
            full_bytes = sum(v.numel() * v.element_size() for v in full.values())
            self.log.write(self.args.out, backend=dist.get_backend(), world_size=dist.get_world_size(),
                           state_dict=full, param_bytes_per_rank=per_rank, param_bytes_full=full_bytes,
                           stack="composer", stack_version=composer.__version__)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    stack_report.add_args(ap, steps=8, global_batch=8, lr=3e-3)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    args = stack_report.parse(ap)
    for name in ("seq", "vocab", "dim", "layers", "heads"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1, not %d" % (name.replace("_", "-"), getattr(args, name)))
    if args.dim % args.heads:
        ap.error("--dim (%d) must be a multiple of --heads (%d)" % (args.dim, args.heads))
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    # The same samples at any world size: a step's global batch, in rank order, is consecutive sequences (the
    # DistributedSampler without shuffling deals them out round robin).
    data = sequences(args.global_batch * args.steps, args.vocab, args.seq, args.seed)
    model = TinyLM(args.vocab, args.seq, args.dim, args.layers, args.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    ckpt = args.checkpoint_dir and os.path.abspath(args.checkpoint_dir)
    trainer = Trainer(
        model=model, optimizers=opt, max_duration="%dba" % args.steps,
        device=device_for(args.device, args.backend),
        train_dataloader=DataLoader(data, batch_size=stack_report.per_rank_batch(args, world),
                                    sampler=cdist.get_sampler(data, shuffle=False)),
        parallelism_config={"fsdp": FSDP2Config(state_dict_type="sharded")},
        callbacks=[Report(args)], loggers=[], progress_bar=False, log_to_console=False, seed=args.seed,
        # One checkpoint, after --save-at batches (an interval would also save at the end of training).
        save_folder=ckpt if args.save_at else None, save_overwrite=True,
        save_interval=lambda state, event: event == Event.BATCH_CHECKPOINT and state.timestamp.batch == args.save_at,
        # A sharded checkpoint is one folder that every rank reads its shards from.
        load_path=os.path.join(ckpt, "latest-rank0.pt") if args.resume else None)
    trainer.fit()
    trainer.close()


if __name__ == "__main__":
    main()

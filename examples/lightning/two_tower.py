#!/usr/bin/env python3
"""A two-tower recommender (a user tower and an item tower, scored by their dot product) trained with PyTorch
Lightning's DDP strategy on weft.

    .venv/bin/python examples/lightning/two_tower.py --devices 2                   # CPU, 2 ranks, over weft
    .venv/bin/python examples/lightning/two_tower.py --devices 2 --backend gloo    # the same over gloo
    python examples/lightning/two_tower.py --device cuda --devices 8               # a GPU a rank

Lightning launches the ranks itself: this process is rank 0 and starts the others by running this script
again. weft is selected by the one marked line, `DDPStrategy(process_group_backend="weft")`; the backend is
registered by `import weft.torch` (an installed weft: `import torch` already does). The interactions are
synthetic: a hidden pair of embeddings decides which (user, item) pairs are clicked, the same on every run.
Each step trains one global batch (--global-batch), each rank its 1/N slice (Lightning's DistributedSampler),
and the loss reported is the whole batch's: a checkpoint taken at one world size resumes at another.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stack_report  # noqa: E402  (puts the checkout's python/ on sys.path)

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import weft.torch  # noqa: E402,F401  registers the "weft" backend in every rank Lightning starts

USERS, ITEMS, DIM = 2000, 1000, 32


def interactions(count, seed):
    """(user, item, clicked) triples: clicked where a hidden user and item embedding agree."""
    g = torch.Generator().manual_seed(seed)
    hidden_u, hidden_i = torch.randn(USERS, 8, generator=g), torch.randn(ITEMS, 8, generator=g)
    users = torch.randint(0, USERS, (count,), generator=g)
    items = torch.randint(0, ITEMS, (count,), generator=g)
    clicked = ((hidden_u[users] * hidden_i[items]).sum(1) > 0).float()
    return TensorDataset(users, items, clicked)


def tower(count):
    return nn.Sequential(nn.Embedding(count, DIM), nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, DIM))


class TwoTower(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.save_hyperparameters()
        self.user_tower, self.item_tower = tower(USERS), tower(ITEMS)
        self.losses = []

    def forward(self, users, items):
        return (self.user_tower(users) * self.item_tower(items)).sum(1)

    def training_step(self, batch, batch_idx):
        users, items, clicked = batch
        loss = nn.functional.binary_cross_entropy_with_logits(self(users, items), clicked)
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class Report(pl.Callback):
    """Times each step, saves the checkpoint at --save-at (an epoch's end) and writes the report on rank 0."""

    def __init__(self, args):
        self.args = args
        self.record = stack_report.Log()
        self.t0 = 0.0

    def on_train_start(self, trainer, module):
        self.record.first_step = trainer.global_step  # a resumed run goes on from its checkpoint's step

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.record.step(stack_report.global_mean(outputs["loss"]), time.perf_counter() - self.t0)

    def on_train_epoch_end(self, trainer, module):
        if self.args.save_at and trainer.global_step == self.args.save_at:
            trainer.save_checkpoint(os.path.join(self.args.checkpoint_dir, "two_tower.ckpt"))  # every rank calls it

    def on_train_end(self, trainer, module):
        mine = stack_report.param_bytes(module.parameters())
        per_rank = [None] * dist.get_world_size()
        dist.all_gather_object(per_rank, mine)
        if trainer.is_global_zero:
            self.record.write(self.args.out, backend=dist.get_backend(), world_size=dist.get_world_size(),
                           state_dict=module.state_dict(), param_bytes_per_rank=per_rank, param_bytes_full=mine,
                           stack="lightning", stack_version=pl.__version__)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    stack_report.add_args(ap, steps=8, global_batch=128, lr=0.5)
    ap.add_argument("--devices", type=int, default=2, help="ranks (processes) Lightning starts")
    ap.add_argument("--steps-per-epoch", type=int, default=4, help="--save-at must be a multiple of it")
    args = stack_report.parse(ap)
    if args.devices < 1:
        ap.error("--devices must be at least 1, not %d" % args.devices)
    if args.steps % args.steps_per_epoch or args.save_at % args.steps_per_epoch:
        # Lightning resumes a plain DataLoader at an epoch's start, so checkpoints are taken at epoch ends.
        ap.error("--steps (%d) and --save-at (%d) must be multiples of --steps-per-epoch (%d)" %
                 (args.steps, args.save_at, args.steps_per_epoch))
    torch.set_num_threads(1)
    pl.seed_everything(args.seed, workers=True, verbose=False)

    # The same samples at any --devices: a step's global batch, in rank order, is consecutive samples (Lightning's
    # DistributedSampler without shuffling deals them out round robin).
    data = interactions(args.global_batch * args.steps_per_epoch, args.seed)
    loader = DataLoader(data, batch_size=stack_report.per_rank_batch(args, args.devices), shuffle=False)
    ckpt = os.path.join(args.checkpoint_dir, "two_tower.ckpt") if args.resume else None
    trainer = pl.Trainer(
        accelerator="gpu" if args.device == "cuda" else "cpu", devices=args.devices,
        strategy=DDPStrategy(process_group_backend=args.backend),  # <- weft: process_group_backend="weft"
        max_epochs=args.steps // args.steps_per_epoch, callbacks=[Report(args)],
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, deterministic=True)
    model = TwoTower(args.lr)
    trainer.fit(model, loader, ckpt_path=ckpt)


if __name__ == "__main__":
    main()

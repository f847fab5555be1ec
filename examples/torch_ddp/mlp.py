#!/usr/bin/env python3
"""The MLP of the PyTorch DDP tutorials under stock torch DistributedDataParallel, on weft.

    torchrun --standalone --nproc_per_node 2 examples/torch_ddp/mlp.py --backend weft --out weft.json
    torchrun --standalone --nproc_per_node 2 examples/torch_ddp/mlp.py --backend gloo --out gloo.json
    torchrun --nproc_per_node 8 examples/torch_ddp/mlp.py --device cuda       # a GPU per rank

Each step draws one global batch (the same on every rank) and each rank trains on its slice, so the run's
losses are the same at any world size. The only weft line is `init_process_group("weft")` (after
`import weft.torch`, which registers the name).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import stacks  # noqa: E402
from mlp_ddp import ToyModel, batch  # noqa: E402  the tutorial's model, as weft's own DDP example trains it


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    stacks.add_args(ap, steps=10, global_batch=32, lr=0.05)
    args = ap.parse_args()
    _, _, device = stacks.start(args, dist.init_process_group)  # <- "weft": the one weft line

    torch.manual_seed(args.seed)
    model = ToyModel().to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    first = stacks.load_torch(args, model, opt, device)

    report = stacks.Report(args, first_step=first)
    mine = stacks.rank_slice(args)
    for step in range(first, args.steps):
        with report.step(step) as s:
            x, y = (t.to(device) for t in batch(step, args.global_batch))
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x[mine]), y[mine])
            loss.backward()
            opt.step()
            s.loss = stacks.global_mean(loss)
        stacks.save_torch(args, report, step, model, opt)

    stacks.finish(args, report, model.state_dict())


if __name__ == "__main__":
    main()

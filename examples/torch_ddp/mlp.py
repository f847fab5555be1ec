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
    stacks.add_args(ap, steps=10)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    stacks.check_steps(args)

    stacks.register_weft(args.backend)
    dist.init_process_group(args.backend)  # <- "weft": the one weft line
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit("--global-batch %d is not a multiple of the world size %d" % (args.global_batch, world))
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    torch.manual_seed(args.seed)
    model = ToyModel().to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    first = 0
    if args.load:
        state = torch.load(os.path.join(args.load, "ckpt.pt"), map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        first = state["step"]

    report = stacks.Report(args, first_step=first)
    per = args.global_batch // world
    mine = slice(rank * per, (rank + 1) * per)
    for step in range(first, args.steps):
        with report.step(step) as s:
            x, y = (t.to(device) for t in batch(step, args.global_batch))
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x[mine]), y[mine])
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.SUM)
            s.loss = mean.item() / world
        if report.wants_save(step) and rank == 0:
            os.makedirs(args.save, exist_ok=True)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1},
                       os.path.join(args.save, "ckpt.pt"))
        if report.wants_save(step):
            dist.barrier()

    final = stacks.final_params_path(args)
    if final and rank == 0:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, final)
    report.write(final_params=final)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

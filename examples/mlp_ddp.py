#!/usr/bin/env python3
"""The simple MLP of the PyTorch DDP tutorials, trained data-parallel with weft.

    mpirun -np 4 --oversubscribe .venv/bin/python examples/mlp_ddp.py
    mpirun -np 4 --oversubscribe .venv/bin/python examples/mlp_ddp.py --check
    mpirun -np 8 python3 examples/mlp_ddp.py --device cuda --check   # a GPU per rank, NCCL

Each step draws one global batch of synthetic data (the same on every rank)
and each rank trains on its own slice of it. With --check, every rank also
trains a single-process copy of the model on the whole batch and asserts that
after the last step the parameters agree within float32 rounding: DDP's
average of per-slice mean-loss gradients is the whole batch's gradient.
Run from a checkout, it finds the package in python/ and libweft in build/.
"""

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import weft  # noqa: E402
import weft.torch  # noqa: E402


class ToyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = torch.nn.Linear(10, 10)
        self.relu = torch.nn.ReLU()
        self.net2 = torch.nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def batch(step, size):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(size, 10, generator=g), torch.randn(size, 5, generator=g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-per-rank", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--check", action="store_true", help="compare with a single-process run")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cuda: one GPU per rank (the local rank's), gradients averaged over NCCL")
    ap.add_argument("--backend", default="auto", choices=("auto", "mpi", "ucx"),
                    help="host memory (--device cpu): auto is MPI under mpirun; ucx moves the bytes over UCX")
    args = ap.parse_args()

    if args.device == "cuda":
        comm = weft.init(device="cuda")  # weft picks the local rank's GPU
        device = torch.device("cuda", comm.device)
        torch.cuda.set_device(device)
    else:
        comm, device = weft.init(backend=args.backend), torch.device("cpu")
    launched = weft.launched_world_size()
    if args.check and launched is not None and comm.size != launched:
        sys.exit("check: the world has %d ranks, but the launcher started %d" % (comm.size, launched))
    torch.manual_seed(comm.rank)  # different on each rank: DDP must broadcast rank 0's
    model = ToyModel().to(device)
    ddp = weft.torch.DistributedDataParallel(model, comm=comm)
    reference = copy.deepcopy(model)  # rank 0's weights, after the broadcast
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=args.lr)
    loss_fn = torch.nn.MSELoss()

    b = args.batch_per_rank
    for step in range(args.steps):
        x, y = (t.to(device) for t in batch(step, b * comm.size))
        mine = slice(comm.rank * b, (comm.rank + 1) * b)
        opt.zero_grad()
        loss = loss_fn(ddp(x[mine]), y[mine])
        loss.backward()
        opt.step()
        if args.check:
            ref_opt.zero_grad()
            loss_fn(reference(x), y).backward()
            ref_opt.step()
        if comm.rank == 0 and (step % 5 == 0 or step == args.steps - 1):
            print("step %2d  loss %.5f" % (step, loss.item()), flush=True)

    if args.check:
        worst = 0.0
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            err = (p.detach() - q.detach()).abs().max().item()
            worst = max(worst, err)
            if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
                print("rank %d: %s differs from the single-process run by %.3g" % (comm.rank, name, err))
                sys.exit(1)
        # Every rank holds the same bits: the all-reduce is bit-identical everywhere.
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        lo, hi = flat.clone(), flat.clone()
        comm.all_reduce(lo, op="min")
        comm.all_reduce(hi, op="max")
        if not torch.equal(lo, hi):
            print("rank %d: parameters differ across ranks" % comm.rank)
            sys.exit(1)
        if comm.rank == 0:
            print("OK: %d ranks over %s x %d steps match the single-process run (max |diff| %.3g)" %
                  (comm.size, comm.backend, args.steps, worst))


if __name__ == "__main__":
    main()

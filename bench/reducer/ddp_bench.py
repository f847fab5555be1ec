#!/usr/bin/python3
"""weft.torch.DistributedDataParallel against torch DDP over gloo, same run.

    mpirun -np 2 --oversubscribe /usr/bin/python3 bench/reducer/ddp_bench.py --list resnet50

The model has exactly the parameter shapes of a real network
(bench/data/<list>.tensors, float32) and a forward that touches every
parameter once, so backward produces every gradient (in reverse order) at
almost no compute cost: what is timed is the gradient synchronisation. Per
iteration, interleaved, with a barrier before each: a plain backward (no
DDP), torch DDP (gloo, 25 MiB buckets) and weft DDP (25 MiB buckets).
Reports medians on rank 0: backward times, sync = DDP backward - plain
backward, and weft's sync over torch's.
"""

import argparse
import os
import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import weft  # noqa: E402
import weft.torch  # noqa: E402


class ShapesOnly(torch.nn.Module):
    def __init__(self, shapes):
        super().__init__()
        self.params = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(*s) * 0.01) for s in shapes])

    def forward(self, x):
        return sum((p.sum() * x for p in self.params), torch.zeros(()))


def read_list(name):
    path = name if "/" in name else os.path.join(HERE, "..", "data", name + ".tensors")
    shapes = []
    with open(path) as f:
        for line in f:
            line = line.split("#")[0].split()
            if len(line) >= 2:
                shapes.append(tuple(int(d) for d in line[1].split("x")))
    return shapes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", default="resnet50")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--view", action="store_true", help="weft DDP with gradient_as_bucket_view")
    args = ap.parse_args()
    torch.set_num_threads(1)

    comm = weft.init()
    port = np.zeros(1, dtype=np.int64)
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port[0] = s.getsockname()[1]
    comm.broadcast(port, root=0)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port[0], rank=comm.rank,
                            world_size=comm.size)

    shapes = read_list(args.list)
    torch.manual_seed(0)
    plain = ShapesOnly(shapes)
    theirs = torch.nn.parallel.DistributedDataParallel(ShapesOnly(shapes), bucket_cap_mb=25)
    ours = weft.torch.DistributedDataParallel(ShapesOnly(shapes), comm=comm, bucket_cap_mb=25,
                                              gradient_as_bucket_view=args.view)
    x = torch.tensor(1.0 + comm.rank)
    times = {"plain": [], "torch": [], "weft": []}
    for it in range(args.warmup + args.iters):
        for name, model in (("plain", plain), ("torch", theirs), ("weft", ours)):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.zero_()
            loss = model(x)
            comm.barrier()
            t0 = time.perf_counter()
            loss.backward()
            t1 = time.perf_counter()
            if it >= args.warmup:
                times[name].append((t1 - t0) * 1e3)
    # Both wrappers produced the same averaged gradients.
    for p, q in zip(ours.parameters(), theirs.parameters()):
        if not torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6):
            print("rank %d: weft and torch DDP gradients differ" % comm.rank)
            sys.exit(1)
    if comm.rank == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        n = sum(int(np.prod(s)) for s in shapes)
        sync_t, sync_w = med["torch"] - med["plain"], med["weft"] - med["plain"]
        print("# ddp_bench: %s (%d tensors, %.1f MiB float32), %d ranks, %d iterations (medians, ms)%s" %
              (args.list, len(shapes), n * 4 / 2**20, comm.size, args.iters, ", weft view" if args.view else ""))
        print("%-28s %9s %9s" % ("", "backward", "sync"))
        print("%-28s %9.2f %9s" % ("plain backward (no DDP)", med["plain"], "-"))
        print("%-28s %9.2f %9.2f" % ("torch DDP, gloo", med["torch"], sync_t))
        print("%-28s %9.2f %9.2f" % ("weft DDP", med["weft"], sync_w))
        print("weft sync / torch sync = %.2f (target <= 0.6); backward ratio %.2f" %
              (sync_w / sync_t, med["weft"] / med["torch"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""weft.torch.DistributedDataParallel against torch's own DDP over gloo.

    mpirun -np 4 --oversubscribe .venv/bin/python tests/python/test_ddp_vs_torch.py

Every rank runs the same micro-batches through both wrappers (same initial
weights) and compares the gradients after each backward within float32
rounding: no_sync accumulation then a synced backward, for separate gradient
buffers and for gradient-as-bucket-view, and find_unused_parameters with a
head that some ranks skip. Exits 77 (skip) without torch.
"""

import copy
import os
import socket
import sys

try:
    import numpy as np
    import torch
    import torch.distributed as dist
except ImportError as e:  # meson reads 77 as "skipped"
    print("skip: needs .venv/bin/python (tools/setup) with torch and numpy (%s)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import weft  # noqa: E402
import weft.torch  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("rank %d: FAIL %s" % (comm.rank, what), flush=True)


class TwoHeads(torch.nn.Module):
    def __init__(self, with_never):
        super().__init__()
        self.body = torch.nn.Linear(12, 16)
        self.head_a = torch.nn.Linear(16, 4)
        self.head_b = torch.nn.Linear(16, 4)
        if with_never:
            self.never = torch.nn.Linear(16, 4)  # unused on every rank

    def forward(self, x, use_b=True):
        h = torch.relu(self.body(x))
        out = self.head_a(h)
        return out + self.head_b(h) if use_b else out


def data(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 12, generator=g), torch.randn(8, 4, generator=g)


def compare_grads(mine, theirs, what):
    for (name, p), q in zip(mine.module.named_parameters(), theirs.module.parameters()):
        if q.grad is None:
            check(p.grad is None or not p.grad.any(), "%s: %s has a gradient, torch's has none" % (what, name))
            continue
        check(p.grad is not None, "%s: %s has no gradient" % (what, name))
        if p.grad is not None:
            ok = torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6)
            check(ok, "%s: %s differs from torch DDP by %.3g" % (what, name, (p.grad - q.grad).abs().max().item()))


def run(view, find_unused):
    what = "view=%d find_unused=%d" % (view, find_unused)
    torch.manual_seed(0)
    base = TwoHeads(with_never=find_unused)
    ours = weft.torch.DistributedDataParallel(copy.deepcopy(base), comm=comm, bucket_cap_mb=0.001,
                                              first_bucket_cap_mb=0.0005, gradient_as_bucket_view=view,
                                              find_unused_parameters=find_unused)
    theirs = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base), bucket_cap_mb=0.001,
                                                       find_unused_parameters=find_unused)
    loss_fn = torch.nn.MSELoss()
    for rnd in range(3):  # three rounds: the buckets are rebuilt after the first
        for model in (ours, theirs):
            for p in model.parameters():
                p.grad = None
        for micro in range(3):
            x, y = data(10 * rnd + micro, comm.rank)
            use_b = (not find_unused) or (comm.rank % 2 == 0)
            for model in (ours, theirs):
                ctx = model.no_sync() if micro < 2 else _null()
                with ctx:
                    loss_fn(model(x, use_b=use_b), y).backward()
            compare_grads(ours, theirs, "%s round %d micro %d" % (what, rnd, micro))
        with torch.no_grad():  # keep both on the same weights for the next round
            for p, q in zip(ours.parameters(), theirs.parameters()):
                p -= 0.1 * p.grad if p.grad is not None else 0
                q -= 0.1 * q.grad if q.grad is not None else 0


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


comm = weft.init()
# Rank 0 picks a free port for gloo and tells the others over weft.
port = np.zeros(1, dtype=np.int64)
if comm.rank == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port[0] = s.getsockname()[1]
comm.broadcast(port, root=0)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port[0], rank=comm.rank, world_size=comm.size)

for view in (False, True):
    run(view, find_unused=False)
run(False, find_unused=True)
run(True, find_unused=True)

bad = np.array([len(failures)], dtype=np.int64)
comm.all_reduce(bad, op="sum")
if comm.rank == 0:
    print("%s: %d failed checks over %d ranks" % ("FAIL" if bad[0] else "OK", bad[0], comm.size), flush=True)
dist.destroy_process_group()
sys.exit(1 if bad[0] else 0)

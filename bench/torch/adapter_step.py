#!/usr/bin/env python3
"""Step time of weft's own adapters (weft.torch.FullyShardedDataParallel ZeRO-3, DistributedDataParallel) on an
nn.TransformerEncoder, ranks as threads over the in-process backend: one line per adapter, the median step
in ms after a warm-up step. For A/B runs of two versions of the package against the same libweft:

    for pkg in /tmp/weft-before/python python; do
      WEFT_LIBRARY=build/libweft.so.0 .venv/bin/python bench/torch/adapter_step.py --package $pkg
    done
"""

import argparse
import statistics
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--package", default=None, help="directory holding the weft package to time")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    if args.package:
        sys.path.insert(0, args.package)
    import torch
    import weft
    import weft.torch
    torch.set_num_threads(1)

    def model():
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(args.dim, nhead=4, dim_feedforward=4 * args.dim, dropout=0.0,
                                                 batch_first=True)
        return torch.nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)

    wraps = {
        "fsdp_zero3": lambda m, comm: weft.torch.FullyShardedDataParallel(
            m, comm=comm, zero_stage=3, wrap_classes=[torch.nn.TransformerEncoderLayer]),
        "ddp": lambda m, comm: weft.torch.DistributedDataParallel(m, comm=comm),
    }
    for name, wrap in wraps.items():
        comms = weft.init_in_process(args.world)
        models = [model() for _ in comms]
        times = [[] for _ in comms]

        def rank(r):
            w = wrap(models[r], comms[r])
            opt = torch.optim.SGD(w.parameters(), lr=0.01)
            x = torch.randn(8, 32, args.dim)
            for _ in range(args.steps + 1):
                t0 = time.perf_counter()
                opt.zero_grad()
                w(x).square().mean().backward()
                opt.step()
                times[r].append(time.perf_counter() - t0)
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(args.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        step = statistics.median(max(ts[i] for ts in times) for i in range(1, args.steps + 1))
        print("%s %.3f ms" % (name, 1e3 * step), flush=True)


if __name__ == "__main__":
    main()

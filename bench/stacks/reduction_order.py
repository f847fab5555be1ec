#!/usr/bin/env python3
"""How far weft and gloo each land from an order-independent reference: tells float32 summation order from
a backend computing something else.

    bench/stacks/reduction_order.py --nproc 4 examples/torch_ddp/retinanet.py

Runs the example (torchrun) five times: over weft and over gloo with float32 gradient sums (the default);
over gloo adding the ranks in float32 in another order (`--grad-sum fp32-reversed`); and over both with
`--grad-sum fp64`, where DDP sums in float64 and rounds once, so the order a backend adds the ranks in no
longer shows. Prints, per parameter tensor and over all of them, the largest difference against the
tensor's largest magnitude (as tests/stacks/parity.py measures) of: weft against gloo; each float32 run
against the fp64 reference; and the two fp64 runs against each other. If weft differs from gloo only by
summation order, the fp64 runs agree, and gloo in another order lands as far from the reference as weft.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "stacks"))

import parity  # noqa: E402  the parity test's job launcher


def distances(a_path, b_path):
    import torch
    a, b = torch.load(a_path), torch.load(b_path)
    out = {}
    for k in sorted(set(a) & set(b)):
        x, y = a[k].double(), b[k].double()
        scale = max(x.abs().max().item(), y.abs().max().item(), 1e-12) if x.numel() else 1.0
        out[k] = (x - y).abs().max().item() / scale if x.numel() else 0.0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per job")
    ap.add_argument("--top", type=int, default=8, help="tensors to list, the furthest from the reference first")
    ap.add_argument("script")
    ap.add_argument("script_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    args.launcher = "torchrun"
    args.script = os.path.abspath(args.script)
    extra = [a for a in args.script_args if a != "--"]
    with tempfile.TemporaryDirectory(prefix="weft-order-") as tmp:
        runs = {}
        for backend, width in (("weft", "fp32"), ("gloo", "fp32"), ("gloo", "fp32-reversed"), ("weft", "fp64"),
                               ("gloo", "fp64")):
            out = os.path.join(tmp, "%s-%s.json" % (backend, width))
            runs[backend, width] = parity.run_job(args, backend, out, args.nproc,
                                                  extra + ["--grad-sum", width])["final_params"]
        pairs = [("weft fp32 vs gloo fp32", ("weft", "fp32"), ("gloo", "fp32")),
                 ("weft fp32 vs reference", ("weft", "fp32"), ("weft", "fp64")),
                 ("gloo fp32 vs reference", ("gloo", "fp32"), ("weft", "fp64")),
                 ("gloo reversed vs ref.", ("gloo", "fp32-reversed"), ("weft", "fp64")),
                 ("weft fp64 vs gloo fp64", ("weft", "fp64"), ("gloo", "fp64"))]
        table = {name: distances(runs[a], runs[b]) for name, a, b in pairs}
    ref = table["gloo fp32 vs reference"]
    print("%d ranks; largest difference / largest magnitude, per tensor (the %d furthest from the reference "
          "over gloo):" % (args.nproc, args.top))
    print("%-48s" % "tensor" + "".join("%25s" % name for name, _, _ in pairs))
    for k in sorted(ref, key=ref.get, reverse=True)[:args.top]:
        print("%-48s" % k + "".join("%25.3g" % table[name][k] for name, _, _ in pairs))
    print("%-48s" % "all tensors" + "".join("%25.3g" % max(table[name].values()) for name, _, _ in pairs))


if __name__ == "__main__":
    main()

"""torch.distributed's gloo backend as a peer of weft (bench/peers/run).

The same sizes, timing loop, shifted buffers, inputs and element-by-element
checks as bench/peers/peer.cc, through the calls a torch user makes:
all_reduce and broadcast in place, reduce_scatter_tensor,
all_gather_into_tensor and all_to_all_single. Launched by mpirun (one
process per rank); the ranks meet through a file store at --init-file.
Writes PREFIX.rank<N>.json; exits 1 when any value was wrong.

  mpirun -np 2 .venv/bin/python bench/peers/gloo.py -b 4K -e 1M -f 4 -n 20 --out /tmp/g --init-file /tmp/g.store
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "alltoall")
CHUNK = 1 << 22


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        scale = units.get(text[-1].upper(), 1)
        value = float(text[:-1] if scale != 1 else text) * scale
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"'{text}' is not a size (a positive number, optional K, M or G)")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive size")
    return int(round(value))


def int_in(lo, hi):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer in [{lo}, {hi}]")
        return value
    return parse


def collectives_arg(text):
    names = text.split(",")
    for name in names:
        if name not in COLLECTIVES:
            raise argparse.ArgumentTypeError(f"'{name}' is not one of {', '.join(COLLECTIVES)}")
    return names


def layout(name, elements, n):
    """(count, send elements, recv elements), as weft-bench lays out each call."""
    block = elements // n
    return {"all_reduce": (elements, elements, elements), "broadcast": (elements, elements, elements),
            "reduce_scatter": (block, block * n, block), "all_gather": (block, block, block * n),
            "alltoall": (block, block * n, block * n)}[name]


def values(rank, start, length, seed):
    """peer.cc's Value(): small integers, exact in float32 sums."""
    i = torch.arange(start, start + length, dtype=torch.int64)
    return ((i * 13 + rank * 7 + seed) % 23 + 1).to(torch.float32)


def expected(name, count, start, length, me, n, seed):
    """recv[start:start+length] as rank `me` must hold it after the check call."""
    if name in ("all_reduce", "reduce_scatter"):
        base = start if name == "all_reduce" else me * count + start
        return sum(values(r, base, length, seed) for r in range(n))
    if name == "broadcast":
        return values(0, start, length, seed)
    # all_gather and alltoall: block q of recv comes from rank q
    i = torch.arange(start, start + length, dtype=torch.int64)
    q, at = i // count, i % count
    if name == "alltoall":
        at = at + me * count
    return ((at * 13 + q * 7 + seed) % 23 + 1).to(torch.float32)


def call(name, send, recv, count):
    if name == "all_reduce":
        dist.all_reduce(recv[:count])
    elif name == "reduce_scatter":
        dist.reduce_scatter_tensor(recv[:count], send[:count * dist.get_world_size()])
    elif name == "all_gather":
        dist.all_gather_into_tensor(recv[:count * dist.get_world_size()], send[:count])
    elif name == "broadcast":
        dist.broadcast(recv[:count], src=0)
    else:
        n = count * dist.get_world_size()
        dist.all_to_all_single(recv[:n], send[:n])


class Bench:
    def __init__(self, args):
        self.args = args
        self.capacity = args.e // 4
        self.send = torch.zeros(self.capacity, dtype=torch.float32)
        self.recv = torch.zeros(self.capacity, dtype=torch.float32)
        self.checks = 0

    def call(self, name, lay, it):
        count, s, r = lay
        elements = max(s, r, 1)
        steps = max(1, self.capacity // elements)
        shift = elements * (it % steps)
        call(name, self.send[shift:], self.recv[shift:], count)

    def time(self, name, lay):
        offsets = min(self.capacity // max(lay[1], lay[2], 1), self.args.n)
        for i in range(max(offsets, 1)):
            self.call(name, lay, i)
        dist.barrier()
        start = time.perf_counter()
        for i in range(self.args.n):
            self.call(name, lay, i)
        return (time.perf_counter() - start) / self.args.n

    def check(self, name, lay):
        self.checks += 1
        count, s, r = lay
        me, n = dist.get_rank(), dist.get_world_size()
        self.send[:s] = values(me, 0, s, self.checks)
        self.recv[:r] = float("nan")
        if name == "all_reduce" or (name == "broadcast" and me == 0):
            self.recv[:r] = self.send[:r]  # in place: the input is the output buffer
        call(name, self.send, self.recv, count)
        if self.args.corrupt and r > 0:
            self.recv[0] += 1
        wrong = 0
        for start in range(0, r, CHUNK):  # in chunks: the expected values of 256 MiB would not fit 4 ranks' memory
            length = min(CHUNK, r - start)
            want = expected(name, count, start, length, me, n, self.checks)
            got = self.recv[start:start + length]
            bad = (got.view(torch.int32) != want.view(torch.int32)).nonzero()
            if len(bad) and not wrong:
                i = int(bad[0])
                print(f"gloo: rank {me}: {name} count {count}: element {start + i} is {float(got[i])}, "
                      f"want {float(want[i])}", file=sys.stderr)
            wrong += len(bad)
        return r, wrong


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", type=size_arg, default=4096)
    p.add_argument("-e", type=size_arg, default=4096)
    p.add_argument("-f", type=int_in(2, 1 << 20), default=4)
    p.add_argument("-n", type=int_in(1, 1 << 24), default=20)
    p.add_argument("-w", type=int_in(0, 1 << 24), default=5)
    p.add_argument("--collectives", type=collectives_arg, default=list(COLLECTIVES))
    p.add_argument("--out", required=True)
    p.add_argument("--init-file", required=True)
    p.add_argument("--corrupt", action="store_true", help="flip every checked result: the check must fail")
    args = p.parse_args()
    if args.b > args.e:
        p.error(f"-b {args.b} is larger than -e {args.e}")
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{args.init_file}", rank=rank, world_size=size)
    bench, rows, wrong = Bench(args), [], 0
    for name in args.collectives:
        for s in (args.e, args.b):
            for i in range(args.w):
                bench.call(name, layout(name, s // 4, size), i)
        s = args.b
        while s <= args.e:
            lay = layout(name, s // 4, size)
            seconds = bench.time(name, lay)
            checked, bad = bench.check(name, lay)
            wrong += bad
            rows.append({"collective": name, "size": max(lay[1], lay[2]) * 4, "count": lay[0], "seconds": seconds,
                         "checked": checked, "wrong": bad})
            s *= args.f
    with open(f"{args.out}.rank{rank}.json", "w") as f:
        json.dump({"peer": "gloo", "rank": rank, "nranks": size, "rows": rows}, f)
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

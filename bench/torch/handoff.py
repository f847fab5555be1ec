"""Per-call cost of a small blocking collective over weft and gloo, in the same job: the median time, and what
each call costs the process in context switches and CPU (all its threads, from /proc/self/task).

    .venv/bin/torchrun --standalone --nproc_per_node 2 bench/torch/handoff.py
    .venv/bin/torchrun --standalone --nproc_per_node 4 bench/torch/handoff.py --op all_reduce --calls 200
    .venv/bin/torchrun --standalone --nproc_per_node 2 bench/torch/handoff.py --op all_reduce --in-flight 6

A blocking call over a host-stream backend is a hand-off: the caller wakes a worker thread, which runs the
collective and wakes the caller. On a loaded host every wake-up waits for a core, so the voluntary context
switches per call say how many hand-offs the call costs, whatever the load does to the time. With
--in-flight K, each sample issues K calls with async_op=True and then waits for all of them, as DDP's buckets
are issued during backward; the time and the counts are then per call. Backends alternate, twice each (the
load drifts); rank 0 prints, the time being the slowest rank's median.
Environment: WEFT_SOCKET_IFNAME=lo keeps weft's bootstrap on loopback.
"""

import argparse
import glob
import os
import statistics
import time

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  registers "weft"


def switches():
    """Voluntary and involuntary context switches of every thread of this process."""
    v = n = 0
    for f in glob.glob("/proc/self/task/*/status"):
        try:
            with open(f) as fh:
                for line in fh:
                    if line.startswith("voluntary_ctxt_switches"):
                        v += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        n += int(line.split()[1])
        except OSError:  # a thread that ended meanwhile
            pass
    return v, n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--op", choices=["all_gather_into_tensor", "all_reduce"], default="all_gather_into_tensor")
    p.add_argument("--bytes", type=int, default=4096, help="the largest buffer (all-gather: the output)")
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--in-flight", type=int, default=1, help="calls issued before waiting for them (async_op)")
    args = p.parse_args()
    dist.init_process_group("weft")
    gloo = dist.new_group(backend="gloo")
    torch.set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    count = args.bytes // 4
    k = args.in_flight
    if k < 1:
        p.error("--in-flight = %d: at least 1" % k)
    if rank == 0:
        print("# %s, %d bytes, %d ranks, %d calls, %d in flight: median time (us, slowest rank), per call: "
              "voluntary and involuntary context switches, CPU (us), of rank 0's process" %
              (args.op, args.bytes, world, args.calls, k))
    for name, group in [("weft", None), ("gloo", gloo)] * 2:
        outs, inp = [torch.empty(count) for _ in range(k)], torch.ones(count // world)
        if args.op == "all_reduce":
            def one(out):
                return dist.all_reduce(out, group=group, async_op=k > 1)
        else:
            def one(out):
                return dist.all_gather_into_tensor(out, inp, group=group, async_op=k > 1)

        def fn():
            works = [one(out) for out in outs]
            if k > 1:
                for w in works:
                    w.wait()
        for _ in range(50):
            fn()
        dist.barrier(group=gloo)
        s0, c0 = switches(), time.process_time()
        samples = []
        rounds = max(1, args.calls // k)
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) / k)
        s1, c1 = switches(), time.process_time()
        worst = torch.tensor([statistics.median(samples)], dtype=torch.float64)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX, group=gloo)
        if rank == 0:
            print("%6s %10.1f us %8.2f vol %8.2f invol %10.1f us cpu   (threads: %d)" % (
                name, worst.item() * 1e6, (s1[0] - s0[0]) / (rounds * k), (s1[1] - s0[1]) / (rounds * k),
                (c1 - c0) / (rounds * k) * 1e6, len(os.listdir("/proc/self/task"))), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A job that makes its process groups again: destroy_process_group, then init_process_group("weft") in the same
processes, three times, as a job recovering from a failure does.

    .venv/bin/torchrun --standalone --nproc_per_node 3 tests/torch/test_reinit.py

torch names the groups of each round as it did the first time, so each round's groups have the same store prefixes
as the last round's, and those keys are still in the store. Each round makes the world, a group that leaves the
middle ranks out and a split of the world (where a device is bound, torch splits), and checks an all_reduce on
each; a rank that joined an earlier round's communicator would wait for it until the group's timeout.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

from common import Checks, bound_device  # also registers "weft"

ROUNDS = 3


def one_round(n, job):
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((1000,), float(rank + 1 + n))
    dist.all_reduce(x)
    job.check(bool((x == sum(r + 1 + n for r in range(world))).all()), "round %d: world all_reduce" % n)
    ends = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        y = torch.full((7,), float(rank + n))
        dist.all_reduce(y, group=ends)
        job.check(bool((y == world - 1 + 2 * n).all()), "round %d: all_reduce on ranks 0 and %d" % (n, world - 1))
    with bound_device():  # torch splits
        split = dist.split_group(split_ranks=[list(range(world))])
    z = torch.full((3,), float(rank))
    dist.all_reduce(z, group=split)
    job.check(bool((z == world * (world - 1) / 2).all()), "round %d: all_reduce on the split" % n)
    dist.destroy_process_group()


def main():
    job = Checks(int(os.environ["RANK"]))
    for n in range(ROUNDS):
        one_round(n, job)
    print("rank %d: %d rounds, %d failures" % (job.rank, ROUNDS, len(job.failures)), flush=True)
    sys.exit(1 if job.failures else 0)


if __name__ == "__main__":
    main()

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

from common import bound_device  # also registers "weft"

ROUNDS = 3


def check(ok, what, failures):
    if not ok:
        failures.append(what)
        print("rank %d FAIL: %s" % (dist.get_rank(), what), file=sys.stderr, flush=True)


def one_round(n, failures):
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((1000,), float(rank + 1 + n))
    dist.all_reduce(x)
    check(bool((x == sum(r + 1 + n for r in range(world))).all()), "round %d: world all_reduce" % n, failures)
    ends = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        y = torch.full((7,), float(rank + n))
        dist.all_reduce(y, group=ends)
        check(bool((y == world - 1 + 2 * n).all()), "round %d: all_reduce on ranks 0 and %d" % (n, world - 1),
              failures)
    with bound_device():  # torch splits
        split = dist.split_group(split_ranks=[list(range(world))])
    z = torch.full((3,), float(rank))
    dist.all_reduce(z, group=split)
    check(bool((z == world * (world - 1) / 2).all()), "round %d: all_reduce on the split" % n, failures)
    dist.destroy_process_group()


def main():
    failures = []
    for n in range(ROUNDS):
        one_round(n, failures)
    print("rank %s: %d rounds, %d failures" % (os.environ.get("RANK", "?"), ROUNDS, len(failures)), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

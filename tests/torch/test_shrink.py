"""dist.shrink_group on weft: a job goes on without ranks that failed.

    .venv/bin/torchrun --standalone --nproc_per_node 3 tests/torch/test_shrink.py

torch's shrink_group makes a group again from its remaining ranks alone (torch's own NCCL backend is the only other
that can). Here, at N ranks:
- a group of every rank is shrunk by all but the last rank with SHRINK_ABORT while rank 0 has an all-reduce in
  flight on it that nobody joins: that work fails at once, and the new group of N-1 ranks runs collectives;
- the backend refuses, naming the value, flags it does not know and excluded ranks that are out of range, repeated
  or the caller itself;
- then the last rank leaves the job without a word (os._exit, as a crash would; with exit status 0, since torchrun
  stops every worker when one fails). The others' next all_reduce on the default group fails, naming that rank, and
  they shrink the default group without it: the new default group runs collectives on its N-1 ranks, a new_group
  made from it too, and destroy_process_group frees it.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from common import Checks  # also registers "weft"


def sums(group, world_ranks):
    """all_reduce and all_gather_into_tensor on `group`, whose ranks are `world_ranks` (the original numbering)."""
    me = int(os.environ["RANK"])
    x = torch.full((1000,), float(me + 1))
    dist.all_reduce(x, group=group)
    ok = bool((x == sum(r + 1 for r in world_ranks)).all())
    out = torch.zeros(len(world_ranks) * 5, dtype=torch.int64)
    work = dist.all_gather_into_tensor(out, torch.full((5,), me, dtype=torch.int64), group=group, async_op=True)
    work.wait()
    return ok and out.tolist() == [r for r in world_ranks for _ in range(5)]


def main():
    dist.init_process_group("weft", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    last = world - 1
    job = Checks(rank)
    check, expect_raises = job.check, job.expect_raises
    check(sums(None, list(range(world))), "the world before any shrink")

    group = dist.new_group()
    if rank != last:
        lone = dist.all_reduce(torch.ones(10), group=group, async_op=True) if rank == 0 else None
        t0 = time.monotonic()
        small = dist.shrink_group([last], group=group, shrink_flags=dist.distributed_c10d.SHRINK_ABORT)
        if lone is not None:
            expect_raises(lone.wait, (RuntimeError,), ["all_reduce", "rank 0"], "the old group's work after "
                          "SHRINK_ABORT")
            check(time.monotonic() - t0 < 30, "SHRINK_ABORT: the old work failed after %.1f s" %
                  (time.monotonic() - t0))
        check((small.rank(), small.size()) == (rank, world - 1), "the shrunk group's rank and size: %s" %
              ((small.rank(), small.size()),))
        check(sums(small, list(range(world - 1))), "collectives on the shrunk group")
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        check(backend.supports_shrinking, "supports_shrinking")
        for bad, flags, words in [([world], 0, ["ranks_to_exclude", str(world)]), ([last, last], 0, ["twice"]),
                                  ([rank], 0, ["this rank"]), ([last], 4, ["shrink_flags 4"]), ([], 0, ["no ranks"])]:
            expect_raises(lambda: backend.shrink(bad, flags, None), (ValueError,), ["shrink", "rank %d" % rank] + words,
                          "shrink(%s, %d)" % (bad, flags))
        dist.destroy_process_group(small)
    else:
        dist.destroy_process_group(group)

    # The last rank leaves once every other rank is past the barrier (told through torch's store, which torchrun's
    # agent holds), so none of them is still in it when it goes.
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    if rank == last:
        store.wait(["past the barrier %d" % r for r in range(last)])
        sys.stdout.flush()
        os._exit(0)
    store.set("past the barrier %d" % rank, "1")
    t0 = time.monotonic()
    expect_raises(lambda: dist.all_reduce(torch.ones(1000)), (RuntimeError,), ["all_reduce", "rank %d" % last, "dead"],
                  "all_reduce with rank %d gone" % last)
    check(time.monotonic() - t0 < 30, "rank %d's departure was seen after %.1f s" % (last, time.monotonic() - t0))
    world_group = dist.shrink_group([last])
    check(world_group is dist.group.WORLD and (dist.get_rank(), dist.get_world_size()) == (rank, world - 1),
          "the shrunk default group: rank %d of %d" % (dist.get_rank(), dist.get_world_size()))
    check(sums(None, list(range(world - 1))), "collectives on the shrunk default group")
    if world > 2:
        pair = dist.new_group([0, 1])
        if rank < 2:
            check(sums(pair, [0, 1]), "collectives on a new_group of the shrunk default group")
    dist.destroy_process_group()
    print("rank %d: %d failures" % (rank, len(job.failures)), flush=True)
    sys.exit(1 if job.failures else 0)


if __name__ == "__main__":
    main()

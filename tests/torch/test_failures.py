"""Failures of weft's torch backend: a rank that never joins, an aborted group, ranks that call different
collectives.

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/torch/test_failures.py

- abort: on a group of its own, rank 0 starts an all-reduce no other rank joins and aborts the group; the
  Work's wait() raises at once (long before the timeout), naming the op and the rank.
- mismatch: on a group of its own, the ranks call all_reduce with different counts; every rank's call raises
  at once, naming the first two calls that differ (the lowest rank's unlike rank 0's) and saying the group is
  unusable; the group refuses what follows, and the default group still works.
- debug: a group made under TORCH_DISTRIBUTED_DEBUG=DETAIL is torch's wrapper around weft's backend; its
  collectives run on weft, and the wrapper reports a mismatch before weft sees it.
- timeout (last: a group that timed out is unusable, as on NCCL): the default group has a 6 s timeout; the
  last rank skips one all-reduce, and every other rank's all_reduce raises within the timeout (plus slack for a
  loaded machine), naming the op, its rank and the timeout. The skipping rank waits on gloo meanwhile, so its
  peers see a timeout, not a departure.
"""

import datetime
import time

import torch
import torch.distributed as dist

from common import Job

TIMEOUT_S = 6


def test_abort(job):
    group = dist.new_group(backend="weft", timeout=datetime.timedelta(seconds=120))
    x = torch.ones(1000)
    if job.rank == 0:
        work = dist.all_reduce(x, group=group, async_op=True)
        time.sleep(0.2)
        job.check(not work.is_completed(), "abort: the lone all_reduce completed")
        t0 = time.monotonic()
        dist.distributed_c10d._abort_process_group(group)
        job.expect_raises(work.wait, (RuntimeError,), ["all_reduce", "rank 0", "abort"], "abort: wait()")
        job.check(time.monotonic() - t0 < 30, "abort: wait() took %.1f s" % (time.monotonic() - t0))
    dist.barrier(group=job.gloo)


def test_timeout(job):
    x = torch.ones(1000)
    last = job.world - 1
    if job.rank != last:
        t0 = time.monotonic()
        job.expect_raises(lambda: dist.all_reduce(x), (RuntimeError,),
                          ["all_reduce", "rank %d" % job.rank, "timed out"], "timeout: all_reduce")
        elapsed = time.monotonic() - t0
        job.check(elapsed < TIMEOUT_S + 20, "timeout: the all_reduce failed after %.1f s (timeout %d s)" %
                  (elapsed, TIMEOUT_S))
    dist.barrier(group=job.gloo)  # the last rank waits here: it is alive but never joins


def test_mismatch(job):
    group = dist.new_group(backend="weft")
    x = torch.ones(3 + 2 * job.rank)
    t0 = time.monotonic()
    job.expect_raises(lambda: dist.all_reduce(x, group=group), (dist.DistBackendError,),
                      ["all_reduce", "rank %d" % job.rank, "different collectives", "rank 1 called all_reduce(count 5",
                       "rank 0 called all_reduce(count 3", "unusable"], "mismatch: all_reduce of different counts")
    job.check(time.monotonic() - t0 < TIMEOUT_S, "mismatch: raised after %.1f s, not at once" %
              (time.monotonic() - t0))
    job.expect_raises(lambda: dist.all_reduce(torch.ones(4), group=group), (dist.DistBackendError,),
                      ["all_reduce", "rank %d" % job.rank, "unusable"], "mismatch: the next all_reduce on the group")
    dist.destroy_process_group(group)
    job.check_still_works("after a mismatch")


def test_debug_detail(job):
    level = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        group = dist.new_group(backend="weft")
    finally:
        dist.set_debug_level(level)
    backend = group._get_backend(torch.device("cpu"))
    inner = getattr(backend, "wrapped_pg", None)
    job.check(type(backend).__name__ == "_ProcessGroupWrapper" and type(inner).__name__ == "WeftBackend",
              "debug: the group's backend is %s around %s, not torch's wrapper around weft's" %
              (type(backend).__name__, type(inner).__name__))
    x = torch.full((1000,), float(job.rank + 1))
    dist.all_reduce(x, group=group)
    job.check(bool((x == job.world * (job.world + 1) / 2).all().item()), "debug: all_reduce under the wrapper")
    out = torch.zeros(job.world * 7, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.full((7,), job.rank, dtype=torch.int64), group=group)
    job.check(out.tolist() == [q for q in range(job.world) for _ in range(7)], "debug: all_gather under the wrapper")
    job.expect_raises(lambda: dist.all_reduce(torch.ones(3 + 2 * job.rank), group=group), (RuntimeError,),
                      ["mismatch", "ALLREDUCE"], "debug: the wrapper's mismatch report")
    dist.destroy_process_group(group)


def main():
    job = Job(timeout_s=TIMEOUT_S)
    job.run("abort", test_abort)
    job.run("mismatch", test_mismatch)
    job.run("debug", test_debug_detail)
    job.run("timeout", test_timeout)
    job.finish()


if __name__ == "__main__":
    main()

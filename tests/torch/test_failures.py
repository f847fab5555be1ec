"""Failures of weft's torch backend: a rank that never joins, an aborted group.

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/torch/test_failures.py

- abort: on a group of its own, rank 0 starts an all-reduce no other rank joins and aborts the group; the
  Work's wait() raises at once (long before the timeout), naming the op and the rank.
- timeout: the default group has a 6 s timeout; the last rank skips one all-reduce, and every other rank's
  all_reduce raises within the timeout (plus slack for a loaded machine), naming the op, its rank and the
  timeout. The skipping rank waits on gloo meanwhile, so its peers see a timeout, not a departure.
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


def main():
    job = Job(timeout_s=TIMEOUT_S)
    job.run("abort", test_abort)
    job.run("timeout", test_timeout)
    job.finish()


if __name__ == "__main__":
    main()

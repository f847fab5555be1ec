"""What the torch-backend tests share: start "weft" and gloo in one torchrun job, record failures, and end with
every rank's verdict combined (over gloo), so a rank that fails fails the job.

    from common import Job
    job = Job()                       # dist.init_process_group("weft") + a gloo group of the same ranks
    job.check(torch.equal(a, b), "all_reduce sum int8 count 7")
    job.finish()                      # exits 1 on every rank if any rank failed a check

Run by meson under `.venv/bin/torchrun --standalone --nproc_per_node N`; WEFT_SOCKET_IFNAME=lo keeps weft's
bootstrap on loopback.
"""

import contextlib
import datetime
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  registers "weft"


@contextlib.contextmanager
def bound_device():
    """The default group with a device bound while inside, as init_process_group(device_id=cuda:N) binds one: torch
    then makes split_group's groups, and new_group's on the ranks left out, by splitting. Without a GPU, only the
    binding is set (nothing else of torch's looks at the device), and only CPU tensors can move."""
    world = dist.distributed_c10d._get_default_group()
    world.bound_device_id = torch.device("cuda", 0)
    try:
        yield world
    finally:
        world.bound_device_id = None


def same_bits(a, b):
    """True when a and b have one dtype, one shape and the same bytes (so -0.0 differs from 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


class Checks:
    """One rank's checks, each failure printed as it happens. Job's, and on their own for the tests whose process
    groups come and go (re-init, shrink), which have no lasting group to tally the ranks' failures over."""

    def __init__(self, rank):
        self.rank = rank
        self.failures = []
        self.checks = 0

    def check(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures.append(what)
            if len(self.failures) <= 20:
                print("rank %d FAIL: %s" % (self.rank, what), file=sys.stderr, flush=True)

    def expect_raises(self, fn, types, words, what):
        """fn() must raise one of `types` with every word of `words` in its message."""
        try:
            fn()
        except types as e:
            msg = str(e)
            missing = [w for w in words if w not in msg]
            self.check(not missing, "%s: message lacks %s: %s" % (what, missing, msg[:300]))
            return msg
        except Exception as e:  # noqa: BLE001  the wrong kind of failure is a failure
            self.check(False, "%s: raised %s, not %s: %s" % (what, type(e).__name__, types, str(e)[:300]))
            return None
        self.check(False, "%s: did not raise" % what)
        return None


class Job(Checks):
    def __init__(self, timeout_s=120, device_id=None):
        dist.init_process_group("weft", timeout=datetime.timedelta(seconds=timeout_s), device_id=device_id)
        super().__init__(dist.get_rank())
        self.world = dist.get_world_size()
        self.gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=120))
        self.t0 = time.monotonic()

    def check_still_works(self, what):
        """An all-reduce on the weft group gives the right sum: the group survived whatever came before."""
        x = torch.full((10,), float(self.rank + 1))
        dist.all_reduce(x)
        self.check(bool((x == self.world * (self.world + 1) / 2).all().item()), "all_reduce " + what)

    def run(self, name, fn):
        """Runs one test function; an exception in it is one failure, and the job goes on."""
        try:
            fn(self)
        except Exception:  # noqa: BLE001
            self.check(False, "%s raised:\n%s" % (name, traceback.format_exc()))

    def finish(self):
        failed = torch.tensor([len(self.failures)], dtype=torch.int64)
        dist.all_reduce(failed, group=self.gloo)
        if self.rank == 0:
            print("%d ranks, %d checks per rank, %d failures in all, %.1f s" %
                  (self.world, self.checks, failed.item(), time.monotonic() - self.t0), flush=True)
        dist.destroy_process_group()
        sys.exit(1 if failed.item() else 0)


def run_tests(tests):
    """Runs each (name, fn) of `tests` in one Job and exits with the job's verdict."""
    job = Job()
    for name, fn in tests:
        job.run(name, fn)
    job.finish()


def skip_without_cuda(reason_prefix):
    """Exits 77 (meson's skip) on every rank where torch has no usable CUDA device, saying why."""
    if not torch.cuda.is_available():
        if int(os.environ.get("RANK", "0")) == 0:
            print("skip: %s: torch.cuda.is_available() is False on this machine" % reason_prefix, flush=True)
        sys.exit(77)

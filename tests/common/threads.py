"""This process's weft host stream threads, as the tests that check where they run see them."""

import os


def stream_threads():
    """{thread id: the CPUs it may run on} for each thread named weft-stream (core/stream.cc names them), whatever
    other threads come and go meanwhile."""
    out = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % task) as f:
                if f.read().strip() == "weft-stream":
                    out[int(task)] = os.sched_getaffinity(int(task))
        except OSError:  # a thread that ended meanwhile
            pass
    return out

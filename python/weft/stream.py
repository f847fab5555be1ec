"""Host streams (weftStream_t): in-order queues of weft work on host memory,
each run by a thread of its own, so collectives overlap the caller's compute.

    s = weft.Stream()
    group.unshard_into(buf, stream=s)   # returns at once
    ...                                 # compute
    s.synchronize()                     # raises the first error since the last sync
"""

import ctypes

from . import _lib


# weftStreamFlags_t
WAITERS_RUN = 1
ISSUER_CPU = 2


class Stream:
    def __init__(self, waiters_run=False, issuer_cpu=False):
        """waiters_run: synchronize() runs the pending work on the calling thread whenever the stream's own
        thread is not running any (weftStreamWaitersRun): no hand-off for work that is waited for at once.
        issuer_cpu: the stream's thread runs each piece of work on the CPU the enqueuing thread was on
        (weftStreamIssuerCpu): for ranks with no core to spare for communication."""
        h = ctypes.c_void_p()
        flags = (WAITERS_RUN if waiters_run else 0) | (ISSUER_CPU if issuer_cpu else 0)
        _lib.call("weftStreamCreateWithFlags", ctypes.byref(h), flags)
        self._h = h
        self._held = []  # tensors of enqueued work (_tensors.keep_alive), until it has run

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("weft: the stream was destroyed")
        return self._h

    def _hold(self, objs):
        self._held.append(objs)

    def synchronize(self):
        try:
            _lib.call("weftStreamSynchronize", self.handle)
        finally:  # done, failed or not: nothing enqueued before runs any more
            self._held = []

    def query(self):
        """True when everything enqueued has run."""
        code = _lib.lib.weftStreamQuery(self.handle)  # weftInProgress is not an error
        if code == _lib.IN_PROGRESS:
            return False
        self._held = []
        _lib.check(code)
        return True

    def destroy(self):
        if self._h is not None:
            h, self._h = self._h, None
            try:
                _lib.call("weftStreamDestroy", h)  # waits for the work
            finally:
                self._held = []

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing to report to
            pass

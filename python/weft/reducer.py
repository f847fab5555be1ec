"""The DDP reducer (weft.h "DDP reducer") for any framework: register the
gradients once, mark each ready during backward, finalize.

    red = weft.Reducer(comm, [(p.numel(), torch.float32) for p in params], names=...)
    ... in backward: red.mark_ready(i, p.grad) ...
    red.finalize()                        # every marked grad holds the average

On a CUDA communicator the gradients are CUDA tensors and each call takes a
CUDA stream (a torch.cuda.Stream or an int cudaStream_t; None: torch's
current stream on the gradient's device): mark_ready records an event on
it (the reducer reads the gradient after the work queued there), and
finalize makes its stream wait for the averages without blocking the host.
"""

import ctypes

from . import _lib
from ._tensors import describe, dtype_code, stream_handle

COMM_DTYPES = {None: -1, "float16": 1, "bfloat16": 2}


class Reducer:
    def __init__(self, comm, grads, names=None, bucket_cap_bytes=None, first_bucket_cap_bytes=None,
                 comm_dtype=None, find_unused=False, static_graph=False, rebuild_buckets=True,
                 gradient_as_bucket_view=False):
        """Collective over comm. grads: (count, dtype) pairs; dtype a torch or numpy dtype or a name.
        bucket_cap_bytes, first_bucket_cap_bytes: None for weft's defaults (_lib.REDUCER_DEFAULTS: 25 MiB, 1 MiB)."""
        n = len(grads)
        specs = (_lib.Tensor * max(n, 1))()
        for i, (count, dtype) in enumerate(grads):
            specs[i] = _lib.Tensor(None, count, dtype_code(dtype))
        cfg = _lib.ReducerConfig()
        if bucket_cap_bytes is not None:
            cfg.bucket_cap_bytes = int(bucket_cap_bytes)
        if first_bucket_cap_bytes is not None:
            cfg.first_bucket_cap_bytes = int(first_bucket_cap_bytes)
        cfg.comm_dtype = COMM_DTYPES[comm_dtype]
        cfg.find_unused = int(find_unused)
        cfg.static_graph = int(static_graph)
        cfg.rebuild_buckets = int(rebuild_buckets)
        cfg.gradient_as_bucket_view = int(gradient_as_bucket_view)
        if names is not None:
            self._names = (ctypes.c_char_p * max(n, 1))(*[s.encode() for s in names])
            cfg.names = self._names
        self.comm = comm
        self.names = list(names) if names is not None else None
        self.counts = [int(c) for c, _ in grads]
        h = ctypes.c_void_p()
        _lib.call("weftReducerCreate", comm.handle, specs, n, ctypes.byref(cfg), ctypes.byref(h))
        self._h = h

    def _what(self, index):
        if self.names is not None and 0 <= index < len(self.names):
            return "gradient %d (%s)" % (index, self.names[index])
        return "gradient %d" % index

    def mark_ready(self, index, grad, stream=None):
        """grad (tensor or array) must stay alive and unchanged until finalize() returns."""
        what = self._what(index)
        p, n, _ = describe(grad, what, self.comm.memory)
        if n != self.counts[index]:
            raise ValueError("weft: %s has %d elements, registered with %d" % (what, n, self.counts[index]))
        device = grad.device if self.comm.memory == "cuda" else None
        _lib.call("weftReducerMarkReady", self._h, index, p, stream_handle(stream, self.comm.memory, device))

    def mark_ready_ptr(self, index, address, stream=None):
        """As mark_ready for a gradient at `address` (a bucket slot); CUDA: stream None is torch's current one."""
        _lib.call("weftReducerMarkReady", self._h, index, address, stream_handle(stream, self.comm.memory,
                                                                                  self.comm.device))

    def mark_unused(self, index):
        _lib.call("weftReducerMarkUnused", self._h, index)

    def finalize(self, stream=None):
        """Host: returns with the averages written. CUDA: work queued on `stream` after this sees them."""
        _lib.call("weftReducerFinalize", self._h, stream_handle(stream, self.comm.memory, self.comm.device))

    def set_sync(self, sync):
        _lib.call("weftReducerSetSync", self._h, int(bool(sync)))

    def grad_slot(self, index):
        """Address of gradient `index`'s slot in its bucket, and the bucket number."""
        p, b = ctypes.c_void_p(), ctypes.c_int()
        _lib.call("weftReducerGetGradSlot", self._h, index, ctypes.byref(p), ctypes.byref(b))
        return p.value, b.value

    def grad_used(self, index):
        u = ctypes.c_int()
        _lib.call("weftReducerGetGradUsed", self._h, index, ctypes.byref(u))
        return bool(u.value)

    @property
    def bucket_count(self):
        n = ctypes.c_int()
        _lib.call("weftReducerGetBucketCount", self._h, ctypes.byref(n))
        return n.value

    @property
    def layout_version(self):
        v = ctypes.c_int()
        _lib.call("weftReducerGetLayoutVersion", self._h, ctypes.byref(v))
        return v.value

    def destroy(self):
        if self._h is not None:
            h, self._h = self._h, None
            _lib.call("weftReducerDestroy", h)

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

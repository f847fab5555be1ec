"""Communicators: weft.init() for the world, init_in_process(n) for ranks as threads.

    comm = weft.init()                    # mpirun: MPI_COMM_WORLD; alone: one rank
    comm.all_reduce(grad, op="avg")       # in place, torch tensor or numpy array
    comm.broadcast(param, root=0)

Collectives block until their result is in the output (as torch.distributed
without async_op) and follow weft.h's rules: every rank issues the same
collectives in the same order; do not issue on one communicator from two
threads at once.
"""

import ctypes

from . import _lib
from ._tensors import describe, op_code

BACKENDS = {"auto": 0, "inprocess": 1, "mpi": 2, "nccl": 3, "ucx": 4}


class Communicator:
    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)
        r, n = ctypes.c_int(), ctypes.c_int()
        _lib.call("weftCommUserRank", self._h, ctypes.byref(r))
        _lib.call("weftCommCount", self._h, ctypes.byref(n))
        self.rank, self.size = r.value, n.value

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("weft: the communicator was destroyed")
        return self._h

    @property
    def backend(self):
        b = ctypes.c_int()
        _lib.call("weftCommGetBackend", self.handle, ctypes.byref(b))
        return {v: k for k, v in BACKENDS.items()}[b.value]

    def all_reduce(self, tensor, op="sum", out=None):
        """out (default: tensor, in place) = op over ranks of tensor. Returns out."""
        out = tensor if out is None else out
        src, n, t = describe(tensor)
        dst, m, u = describe(out, "out")
        if (m, u) != (n, t):
            raise ValueError("weft: out has %d elements of type %d, tensor %d of type %d" % (m, u, n, t))
        _lib.call("weftAllReduce", src, dst, n, t, op_code(op), self.handle, None)
        return out

    def broadcast(self, tensor, root=0):
        """tensor = root's tensor on every rank, in place. Returns tensor."""
        p, n, t = describe(tensor)
        _lib.call("weftBroadcast", p, p, n, t, root, self.handle, None)
        return tensor

    def all_gather(self, tensor, out):
        """out (size * tensor.numel() elements) = every rank's tensor, rank order."""
        src, n, t = describe(tensor)
        dst, m, u = describe(out, "out")
        if m != n * self.size or u != t:
            raise ValueError("weft: out must hold %d x %d elements of the tensor's type" % (self.size, n))
        _lib.call("weftAllGather", src, dst, n, t, self.handle, None)
        return out

    def reduce_scatter(self, tensor, out, op="sum"):
        """out = block `rank` of op over ranks of tensor (size * out.numel() elements)."""
        src, n, t = describe(tensor)
        dst, m, u = describe(out, "out")
        if n != m * self.size or u != t:
            raise ValueError("weft: tensor must hold %d x %d elements of out's type" % (self.size, m))
        _lib.call("weftReduceScatter", src, dst, m, t, op_code(op), self.handle, None)
        return out

    def barrier(self):
        _lib.call("weftBarrier", self.handle)

    def split(self, color, key=0):
        """Collective. None for color < 0 (WEFT_SPLIT_NOCOLOR)."""
        h = ctypes.c_void_p()
        _lib.call("weftCommSplit", self.handle, color, key, ctypes.byref(h))
        return Communicator(h.value) if h.value else None

    def destroy(self):
        if self._h is not None:
            h, self._h = self._h, None
            _lib.call("weftCommDestroy", h)

    def __repr__(self):
        return "weft.Communicator(rank=%d, size=%d)" % (self.rank, self.size)


_world = None


def init(backend="auto", timeout_ms=0):
    """The world communicator (created on the first call, then the same one).

    Under mpirun/srun it spans the job; otherwise it is a one-rank world."""
    global _world
    if _world is None:
        h = ctypes.c_void_p()
        cfg = _lib.Config(BACKENDS[backend], timeout_ms)
        _lib.call("weftCommInitWorld", ctypes.byref(h), ctypes.byref(cfg))
        _world = Communicator(h.value)
    return _world


def init_in_process(nranks, timeout_ms=0):
    """nranks communicators of one in-process world; drive each from its own thread."""
    handles = (ctypes.c_void_p * nranks)()
    cfg = _lib.Config(BACKENDS["inprocess"], timeout_ms)
    _lib.call("weftCommInitInProcess", handles, nranks, ctypes.byref(cfg))
    return [Communicator(h) for h in handles]

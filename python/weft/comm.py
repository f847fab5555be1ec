"""Communicators: weft.init() for the world, init_in_process(n) for ranks as threads.

    comm = weft.init()                    # mpirun: MPI_COMM_WORLD; alone: one rank
    comm.all_reduce(grad, op="avg")       # in place, torch tensor or numpy array
    comm.broadcast(param, root=0)
    comm.send(x, peer=1, tag=7)           # matched by comm.recv(y, peer=0, tag=7) on rank 1
    sender = comm.recv(y, tag=7)          # from any rank: returns the sender's rank

    comm = weft.init(backend="nccl")      # CUDA memory over NCCL (or weft.init(device=local_rank))
    comm.all_reduce(cuda_grad, op="avg")  # enqueued on torch's current stream

A communicator is on host memory (comm.memory == "host": MPI, in-process)
or on CUDA memory ("cuda": NCCL, one device per rank, comm.device). Host
collectives block until their result is in the output (as torch.distributed
without async_op), or are enqueued on a weft.Stream given as `stream`. CUDA
collectives are enqueued on a CUDA stream and return at once, as
torch.distributed's NCCL backend: `stream` is a torch.cuda.Stream or an int
cudaStream_t, by default torch's current stream on the tensor's device, so
work queued there before the call is seen and work queued after it sees the
result. A tensor of the other memory kind is refused with a ValueError.
Collectives follow weft.h's rules: every rank issues the same collectives in
the same order; do not issue on one communicator from two threads at once.
"""

import ctypes
import os

from . import _lib
from ._tensors import MEMORY_KINDS, describe, keep_alive, op_code, stream_handle

BACKENDS = {"auto": 0, "inprocess": 1, "mpi": 2, "nccl": 3, "ucx": 4}
TAG_MAX = 32767  # WEFT_TAG_MAX: point-to-point tags are in [0, TAG_MAX]
# weftWaitPolicy_t (weft/comm.h): how the host backends wait for peers.
# "default" is $WEFT_WAIT, else "block", or "yield" on a node that runs more
# ranks than it has cores. The in-process backend and NCCL ignore it.
WAIT_POLICIES = {"default": 0, "spin": 1, "yield": 2, "block": 3}


def _wait_code(wait, caller):
    """weftWaitPolicy_t of a wait= argument: one of WAIT_POLICIES' names."""
    if not isinstance(wait, str) or wait not in WAIT_POLICIES:
        raise ValueError("%s: wait=%r is not one of %s" % (caller, wait, ", ".join(repr(w) for w in WAIT_POLICIES)))
    return WAIT_POLICIES[wait]


class PendingSource:
    """The sender of a receive from any rank enqueued on a weft.Stream: .rank once the stream has synchronised."""

    def __init__(self, stream):
        self._stream = stream
        self._cell = ctypes.c_int(-1)

    @property
    def rank(self):
        """The sender's rank (-1 for a receive of 0 elements, which matches nothing, or one that failed); a
        ValueError while the stream has not run it yet."""
        if self._stream is not None and not self._stream.query():
            raise ValueError("weft: the receive from any source has not completed: synchronise its stream first")
        return self._cell.value


class Communicator:
    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)
        r, n, m, d = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        _lib.call("weftCommUserRank", self._h, ctypes.byref(r))
        _lib.call("weftCommCount", self._h, ctypes.byref(n))
        _lib.call("weftCommGetMemoryKind", self._h, ctypes.byref(m))
        _lib.call("weftCommGetCudaDevice", self._h, ctypes.byref(d))
        self.rank, self.size = r.value, n.value
        self.memory = MEMORY_KINDS[m.value]
        # The CUDA ordinal the communicator works on (the one weft chose when
        # asked for none); None for host memory.
        self.device = d.value if self.memory == "cuda" else None

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

    def _args(self, tensor, out, stream, names=("tensor", "out")):
        """(src, n, t), (dst, m, u), stream handle: both tensors of this communicator's kind and device."""
        src = describe(tensor, names[0], self.memory)
        dst = describe(out, names[1], self.memory)
        device = None
        if self.memory == "cuda":
            device = tensor.device
            for what, x in zip(names, (tensor, out)):
                if self.device is not None and x.device.index != self.device:
                    raise ValueError("weft: %s is on %s, but the communicator is on cuda:%d" %
                                     (what, x.device, self.device))
            if out.device != tensor.device:
                raise ValueError("weft: %s is on %s, %s on %s" % (names[1], out.device, names[0], tensor.device))
        handle = stream_handle(stream, self.memory, device)
        keep_alive(stream, tensor, out)
        return src, dst, handle

    def all_reduce(self, tensor, op="sum", out=None, stream=None):
        """out (default: tensor, in place) = op over ranks of tensor. Returns out."""
        out = tensor if out is None else out
        (src, n, t), (dst, m, u), s = self._args(tensor, out, stream)
        if (m, u) != (n, t):
            raise ValueError("weft: out has %d elements of type %d, tensor %d of type %d" % (m, u, n, t))
        _lib.call("weftAllReduce", src, dst, n, t, op_code(op), self.handle, s)
        return out

    def broadcast(self, tensor, root=0, stream=None):
        """tensor = root's tensor on every rank, in place. Returns tensor."""
        (p, n, t), _, s = self._args(tensor, tensor, stream)
        _lib.call("weftBroadcast", p, p, n, t, root, self.handle, s)
        return tensor

    def all_gather(self, output, input, stream=None):
        """output (size * input.numel() elements) = every rank's input, in rank order. Returns output.
        (output, input) as torch.distributed.all_gather_into_tensor."""
        (src, n, t), (dst, m, u), s = self._args(input, output, stream, names=("input", "output"))
        if m != n * self.size or u != t:
            raise ValueError("weft: all_gather output has %d elements of type %d; it must hold %d x %d elements of "
                             "the input's type %d" % (m, u, self.size, n, t))
        _lib.call("weftAllGather", src, dst, n, t, self.handle, s)
        return output

    def reduce_scatter(self, output, input, op="sum", stream=None):
        """output = block `rank` of op over ranks of input (size * output.numel() elements). Returns output.
        (output, input) as torch.distributed.reduce_scatter_tensor."""
        (src, n, t), (dst, m, u), s = self._args(input, output, stream, names=("input", "output"))
        if n != m * self.size or u != t:
            raise ValueError("weft: reduce_scatter input has %d elements of type %d; it must hold %d x %d elements "
                             "of the output's type %d" % (n, t, self.size, m, u))
        _lib.call("weftReduceScatter", src, dst, m, t, op_code(op), self.handle, s)
        return output

    def send(self, tensor, peer, tag=0, stream=None):
        """Sends tensor to rank `peer` on `tag` (0..TAG_MAX), as weftSendTagged: it matches a recv of that tag
        from this rank, in order among that tag's messages. Host memory: returns (or completes on the stream)
        once the data is copied, without waiting for the receiver."""
        (p, n, t), _, s = self._args(tensor, tensor, stream)
        _lib.call("weftSendTagged", p, n, t, peer, tag, self.handle, s)

    def recv(self, tensor, peer=None, tag=0, stream=None):
        """Receives into tensor the next message of `tag` from rank `peer` (weftRecvTagged), or with peer=None
        from any rank (weftRecvAnySource); count and dtype must be the send's. Returns the sender's rank; from any
        rank on a weft.Stream, a PendingSource whose .rank it is once the stream has synchronised."""
        (p, n, t), _, s = self._args(tensor, tensor, stream)
        if peer is not None:
            _lib.call("weftRecvTagged", p, n, t, peer, tag, self.handle, s)
            return peer
        source = PendingSource(stream)
        keep_alive(stream, source)  # weft writes the sender into it when the receive completes
        _lib.call("weftRecvAnySource", p, n, t, tag, ctypes.byref(source._cell), self.handle, s)
        return source.rank if stream is None else source

    def async_error(self):
        """Raises the first error of asynchronous work on this communicator (a NCCL kernel, a host
        stream's collective) as a WeftError; returns None when there is none."""
        code = ctypes.c_int()
        _lib.call("weftCommGetAsyncError", self.handle, ctypes.byref(code))
        if code.value != _lib.SUCCESS:
            raise _lib.WeftError(code.value, "weft: asynchronous work on %r failed (weftResult_t %d)" %
                                 (self, code.value))

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
        where = "" if self.memory == "host" else ", device=%d" % self.device
        return "weft.Communicator(rank=%d, size=%d, memory=%s%s)" % (self.rank, self.size, self.memory, where)


_world = None
_world_wait = "default"


def _device_ordinal(device):
    """None (weft chooses), or the CUDA ordinal of an int, "cuda", "cuda:N" or torch.device."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise ValueError("weft.init: device=%r is not a CUDA device" % (device,))
    if isinstance(device, int):
        if device < 0:
            raise ValueError("weft.init: device=%d (expected a CUDA device ordinal >= 0)" % device)
        return device
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if isinstance(device, str):
        kind, _, rest = device.partition(":")
        index = int(rest) if rest.isdigit() else None
        if rest and index is None:
            kind = None
    if kind != "cuda":
        raise ValueError("weft.init: device=%r is not a CUDA device (an ordinal, \"cuda:N\" or a torch.device)" %
                         (device,))
    return index  # "cuda" without an index: weft chooses (local rank modulo device count)


def launched_world_size():
    """The number of ranks the launcher's variables say this job has, read in
    the order weftCommInitWorld reads them (an MPI launcher, torchrun's
    WORLD_SIZE, a Slurm step, WEFT_WORLD_SIZE), 1 with none of them, and None
    when a launcher names no size (PMIx alone). A check that the world has it
    catches a job that silently became one-rank worlds."""
    env = os.environ
    if any(v in env for v in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
                              "MV2_COMM_WORLD_SIZE")):
        for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"):
            if env.get(v):
                return int(env[v])
        return None
    for v in ("WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "WEFT_WORLD_SIZE"):
        if env.get(v):
            return int(env[v])
    return 1


def init(backend="auto", timeout_ms=0, device=None, wait="default"):
    """The world communicator (created on the first call, then the same one).

    It spans the job that launched the process (mpirun, torchrun, srun or
    WEFT_RANK/WEFT_WORLD_SIZE/WEFT_ROOT; see weftCommInitWorld); alone it is a
    one-rank world.
    backend="nccl", or a CUDA `device` (an ordinal, "cuda:N", a torch.device),
    makes it a CUDA communicator over NCCL on that device (without an index:
    the local rank modulo the node's device count). backend="ucx" moves host
    memory over UCX instead of MPI under mpirun (outside MPI it is UCX already).
    wait ("default", "spin", "yield" or "block": weftConfig_t.wait) is how
    the host backends wait for peers; "block" frees the core for the
    caller's other threads, "spin" answers fastest and keeps a core busy.
    Asking again for a world of another backend, memory kind or device than
    the existing one is a ValueError; a wait other than the first call's is
    one too, since the world keeps the policy it was made with."""
    global _world, _world_wait
    if backend not in BACKENDS:
        raise ValueError("weft.init: backend=%r is not one of %s" % (backend, ", ".join(BACKENDS)))
    wait_code = _wait_code(wait, "weft.init")
    ordinal = _device_ordinal(device)
    cuda = backend == "nccl" or device is not None
    if device is not None and backend not in ("auto", "nccl"):
        raise ValueError("weft.init: device=%r asks for CUDA memory, which backend=%r does not drive (use "
                         "backend=\"nccl\" or \"auto\")" % (device, backend))
    if _world is None:
        h = ctypes.c_void_p()
        cfg = _lib.Config(BACKENDS["nccl" if cuda else backend], timeout_ms, memory=MEMORY_KINDS.index(
            "cuda" if cuda else "host"), cuda_device=-1 if ordinal is None else ordinal, wait=wait_code)
        _lib.call("weftCommInitWorld", ctypes.byref(h), ctypes.byref(cfg))
        _world, _world_wait = Communicator(h.value), wait
        return _world
    if wait != "default" and wait != _world_wait:
        raise ValueError("weft.init: the world communicator exists already with wait=%r; it cannot also wait %r" %
                         (_world_wait, wait))
    want = "cuda" if cuda else (None if backend == "auto" else "host")
    if want is not None and want != _world.memory:
        raise ValueError("weft.init: the world communicator exists already on %s memory (%r); it cannot also be on "
                         "%s memory" % (_world.memory, _world, want))
    if backend not in ("auto", "nccl") and backend != _world.backend:
        raise ValueError("weft.init: the world communicator exists already over %s (%r); it cannot also be over %s"
                         % (_world.backend, _world, backend))
    if ordinal is not None and _world.device is not None and ordinal != _world.device:
        raise ValueError("weft.init: the world communicator exists already on cuda:%d, not cuda:%d" %
                         (_world.device, ordinal))
    return _world


def init_in_process(nranks, timeout_ms=0, wait="default"):
    """nranks communicators of one in-process world; drive each from its own thread.
    wait is checked as weft.init's is; the in-process backend itself waits as it always does."""
    wait_code = _wait_code(wait, "weft.init_in_process")
    nranks = _lib.checked_int(nranks, ctypes.c_int, "nranks")
    handles = (ctypes.c_void_p * max(nranks, 1))()
    cfg = _lib.Config(BACKENDS["inprocess"], timeout_ms, wait=wait_code)
    _lib.call("weftCommInitInProcess", handles, nranks, ctypes.byref(cfg))
    return [Communicator(h) for h in handles]

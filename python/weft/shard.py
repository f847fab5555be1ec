"""Shard groups (weftShardGroup_t): the FSDP / ZeRO machinery, one group of
parameters gathered and released together.

    g = weft.ShardGroup(comm, [(768, 768), (768,)], names=["w", "b"], param_dtype="bfloat16")
    g.load_full([w, b])                 # this rank keeps its fp32 shard
    g.unshard_into(buf)                 # all-gather (cast once) into a buffer you own
    g.reduce_grads([gw, gb])            # reduce-scatter with averaging into the fp32 grad shard
    master, grads = g.shard_tensors()   # torch views an optimizer updates in place

Arguments are torch tensors or numpy arrays on the host, or raw addresses
where the method says so. A group on a CUDA communicator keeps its shards on
the communicator's device: shard_tensors() are torch CUDA tensors over them,
gradients are CUDA tensors, and `stream` is a torch.cuda.Stream or an int
cudaStream_t (None: torch's current stream there); the blocking calls
(load_full, gather_full, scatter_full, zero_grads) take host or CUDA
tensors and run on a stream of the group's own: synchronise the streams that
wrote their inputs or read the shards first.
"""

import ctypes
import operator

from . import _lib
from ._tensors import MEMORY_KINDS, describe, dtype_code, keep_alive, stream_handle

# The structs are declared with the functions, in _lib; their names stay importable from here.
MAX_DIMS, ParamDesc, ShardGroupConfig, ShardDesc, ShardMemory, ScheduleConfig = (
    _lib.MAX_DIMS, _lib.ParamDesc, _lib.ShardGroupConfig, _lib.ShardDesc, _lib.ShardMemory, _lib.ScheduleConfig)
_ACQUIRE, _RELEASE = _lib.ShardAcquireFn, _lib.ShardReleaseFn
_H = _P = ctypes.c_void_p
LAYOUTS = {"flat": 0, "per_param": 1}
REDUCTIONS = {"reduce_scatter": 0, "all_reduce": 1}


class ShardGroup:
    def __init__(self, comm, shapes, names=None, layout="flat", param_dtype="float32", reduce_dtype="float32",
                 reduction="reduce_scatter", replicas=None):
        """Collective over comm. shapes: one tuple per parameter; replicas: the HSDP replicate communicator."""
        n = len(shapes)
        names = list(names) if names is not None else [""] * n
        descs = (ParamDesc * max(n, 1))()
        self._names = [s.encode() for s in names]  # kept alive: the C side reads them during create
        for i, shape in enumerate(shapes):
            if len(shape) > MAX_DIMS:
                raise ValueError("weft: parameter %s has %d dimensions (at most %d)" % (names[i], len(shape), MAX_DIMS))
            descs[i].name = self._names[i]
            descs[i].ndim = len(shape)
            for d, extent in enumerate(shape):
                descs[i].shape[d] = int(extent)
        cfg = ShardGroupConfig(ctypes.sizeof(ShardGroupConfig), LAYOUTS[layout], dtype_code(param_dtype),
                               dtype_code(reduce_dtype), REDUCTIONS[reduction])
        h = ctypes.c_void_p()
        _lib.call("weftShardGroupCreate", comm.handle, None if replicas is None else replicas.handle, descs, n,
                  ctypes.byref(cfg), ctypes.byref(h))
        self._h, self.comm, self.nparams = h, comm, n
        self.memory, self.device = comm.memory, comm.device
        self.numels = [1 for _ in shapes]
        for i, shape in enumerate(shapes):
            for extent in shape:
                self.numels[i] *= int(extent)

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("weft: the shard group was destroyed")
        return self._h

    def shard(self, i):
        """(param_offset, length, shard_offset) of this rank's part of parameter i."""
        d = ShardDesc()
        _lib.call("weftShardGroupGetShard", self.handle, i, ctypes.byref(d))
        return d.param_offset, d.length, d.shard_offset

    def buffers(self):
        """(master address, grad address, count): the fp32 shards."""
        m, g = ctypes.POINTER(ctypes.c_float)(), ctypes.POINTER(ctypes.c_float)()
        n = ctypes.c_size_t()
        _lib.call("weftShardGroupGetBuffers", self.handle, ctypes.byref(m), ctypes.byref(g), ctypes.byref(n))
        return ctypes.cast(m, ctypes.c_void_p).value, ctypes.cast(g, ctypes.c_void_p).value, n.value

    def _stream(self, stream):
        return stream_handle(stream, self.memory, self.device)

    def shard_tensors(self, device=None):
        """torch float32 views of the master and gradient shards (weft owns the memory; each view holds this
        group, so the shards outlive every reference to it but the tensors').
        CUDA: on `device`, by default the communicator's (else torch's current device)."""
        from ._devices import _tensor_at
        import torch
        m, g, n = self.buffers()
        if self.memory == "cuda":
            index = getattr(device, "index", device)
            if index is None:
                index = self.device if self.device is not None else torch.cuda.current_device()
            device = torch.device("cuda", index)
        else:
            device = None
        return _tensor_at(m, n, torch.float32, device, owner=self), _tensor_at(g, n, torch.float32, device, owner=self)

    def load_full(self, tensors):
        """This rank's part of each full float32 parameter (host or, on a CUDA group, device tensors)
        becomes its master shard."""
        ptrs = (_P * max(self.nparams, 1))(*[describe(t, "full[%d]" % i, None)[0] for i, t in enumerate(tensors)])
        _lib.call("weftShardGroupLoadFull", self.handle, ptrs, len(tensors))

    def full_layout(self):
        """(numel, offsets): what unshard_into needs and where each parameter starts in it."""
        numel = ctypes.c_size_t()
        offs = (ctypes.c_size_t * max(self.nparams, 1))()
        _lib.call("weftShardGroupGetFullLayout", self.handle, ctypes.byref(numel), offs, self.nparams)
        return numel.value, list(offs)[:self.nparams]

    def unshard_into(self, address, stream=None):
        """All-gathers the shards, cast to param_dtype, into the buffer at `address` (full_layout()[0] elements)."""
        _lib.call("weftShardGroupUnshardInto", self.handle, address, self._stream(stream))

    def reduce_grads(self, grads, stream=None):
        """grads[i]: parameter i's full gradient; averaged over ranks into the fp32 gradient shard (+=)."""
        arr = (_lib.Tensor * max(self.nparams, 1))()
        for i, g in enumerate(grads):
            arr[i].data, arr[i].count, arr[i].dtype = describe(g, "grads[%d]" % i, self.memory)
        _lib.call("weftShardGroupReduceGrads", self.handle, arr, len(grads), self._stream(stream))
        keep_alive(stream, *grads)  # host: read on the stream's thread

    def zero_grads(self):
        _lib.call("weftShardGroupZeroGrads", self.handle)

    def _ptrs(self, tensors, what):
        if not tensors:
            return None, 0
        return (_P * max(self.nparams, 1))(*[describe(t, "%s[%d]" % (what, i), None)[0]
                                             for i, t in enumerate(tensors)]), \
            len(tensors)

    def gather_full(self, outs, root=0, shard=None):
        """outs[i] (float32, numel) receive the full parameters on root (every rank when root < 0).
        shard: a float32 tensor shaped like the master shard (optimizer state) to gather instead."""
        ptrs, n = self._ptrs(outs, "out")
        if shard is None:
            _lib.call("weftShardGroupGatherFull", self.handle, root, ptrs, n)
        else:
            _lib.call("weftShardGroupGatherFullFrom", self.handle, describe(shard, "shard", self.memory)[0], root, ptrs, n)

    def scatter_full(self, fulls, root=0, shard=None):
        """Root's fulls[i] become every rank's master shard, or `shard` (fulls is only read on root)."""
        ptrs, n = self._ptrs(fulls, "full")
        if shard is None:
            _lib.call("weftShardGroupScatterFull", self.handle, root, ptrs, n)
        else:
            _lib.call("weftShardGroupScatterFullInto", self.handle, root, ptrs, n, describe(shard, "shard", self.memory)[0])

    def memory(self):
        m = ShardMemory()
        _lib.call("weftShardGroupGetMemory", self.handle, ctypes.byref(m))
        return {name: getattr(m, name) for name, _ in ShardMemory._fields_}

    def destroy(self):
        if self._h is not None:
            h, self._h = self._h, None
            _lib.call("weftShardGroupDestroy", h)

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class ShardSchedule:
    """weftShardSchedule_t: gathers each group before its forward and backward, prefetching the next one
    (at most two gathered), releases after use (ZeRO-3) and reduces gradients on its stream.

        s = ShardSchedule(stream, acquire=lambda group, nbytes: address, release=lambda group, address: None)
        s.begin_step(); s.pre_forward(g); ...; s.post_backward(g, grads); s.end_step()

    acquire(group, nbytes) returns the address of nbytes for group's full parameters (a ShardGroup);
    release(group, address) takes it back. Without them full parameters live in weft's pool.

    memory="cuda" drives groups on CUDA communicators: `stream` is the CUDA
    stream the framework computes on (a torch.cuda.Stream or an int
    cudaStream_t; None: torch's current stream when the schedule is made);
    "gathered" then means that stream waits for the gather, and end_step makes
    it wait for the reductions (weft.h, "shard schedule")."""

    def __init__(self, stream=None, reshard_after_forward=True, prefetch=True, acquire=None, release=None,
                 memory="host"):
        if (acquire is None) != (release is None):
            raise ValueError("weft: ShardSchedule needs both acquire and release, or neither")
        if memory not in MEMORY_KINDS:
            raise ValueError("weft: ShardSchedule memory=%r is not one of %s" % (memory, ", ".join(MEMORY_KINDS)))
        self._groups = {}  # handle value -> ShardGroup, for the callbacks
        self._keep = []    # gradients, alive until end_step
        self.memory = memory
        cfg = ScheduleConfig(ctypes.sizeof(ScheduleConfig), int(reshard_after_forward), int(prefetch))
        cfg.memory = MEMORY_KINDS.index(memory)
        # ctypes only prints what a callback raises and hands C a zero: the first exception is kept here
        # and raised from the call that ran the callback (or the next call, for one run on weft's thread).
        self._raised = None
        if acquire is not None:
            def on_acquire(_u, h, nbytes):
                address = acquire(self._groups[h], nbytes)
                if address is None:
                    return 0  # weft refuses the NULL, naming the group
                if isinstance(address, bool) or not hasattr(address, "__index__"):
                    raise TypeError("weft: ShardSchedule acquire returned %r for %d bytes; it must return an "
                                    "address (an int)" % (address, nbytes))
                return operator.index(address)
            # Kept on self: ctypes frees a callback's trampoline with its Python object.
            self._acquire = _ACQUIRE(self._guard(on_acquire, 0))
            self._release = _RELEASE(self._guard(lambda _u, h, addr: release(self._groups[h], addr), None))
            cfg.acquire, cfg.release = self._acquire, self._release
        h = ctypes.c_void_p()
        create = "weftShardScheduleCreateCuda" if memory == "cuda" else "weftShardScheduleCreate"
        self._call(create, stream_handle(stream, memory, None), ctypes.byref(cfg), ctypes.byref(h))
        self._h, self.stream = h, stream

    def _guard(self, fn, failed):
        def run(*args):
            try:
                return fn(*args)
            except BaseException as e:  # noqa: B902 - raised again by _call, on the caller's thread
                if self._raised is None:
                    self._raised = e
                return failed
        return run

    def _call(self, name, *args):
        """_lib.call, then raises what a callback raised during it (the weft error it caused as its cause)."""
        try:
            _lib.call(name, *args)
        except _lib.WeftError as e:
            raised, self._raised = self._raised, None
            if raised is not None:
                raise raised from e
            raise
        raised, self._raised = self._raised, None
        if raised is not None:
            raise raised

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("weft: the shard schedule was destroyed")
        return self._h

    def _enter(self, group):
        self._groups[group.handle.value] = group
        return group.handle

    def declare_order(self, groups):
        """The forward order (backward is its reverse); between steps."""
        arr = (_H * max(len(groups), 1))(*[self._enter(g) for g in groups])
        self._call("weftShardScheduleDeclareOrder", self.handle, arr, len(groups))

    def set_reshard_after_forward(self, group, reshard):
        """Release group after its forward (True) or keep it gathered until its backward is done (False),
        overriding reshard_after_forward for this group: FSDP's root. Between steps."""
        self._call("weftShardScheduleSetReshardAfterForward", self.handle, self._enter(group), int(bool(reshard)))

    def begin_step(self):
        self._call("weftShardScheduleBeginStep", self.handle)

    def pre_forward(self, group):
        self._call("weftShardSchedulePreForward", self.handle, self._enter(group))

    def post_forward(self, group):
        self._call("weftShardSchedulePostForward", self.handle, self._enter(group))

    def pre_backward(self, group):
        self._call("weftShardSchedulePreBackward", self.handle, self._enter(group))

    def post_backward(self, group, grads):
        """grads[i]: parameter i's full gradient; kept alive here until end_step."""
        arr = (_lib.Tensor * max(group.nparams, 1))()
        for i, g in enumerate(grads):
            arr[i].data, arr[i].count, arr[i].dtype = describe(g, "grads[%d]" % i, group.memory)
        self._call("weftShardSchedulePostBackward", self.handle, self._enter(group), arr, len(grads))
        self._keep.append(grads)

    def end_step(self):
        try:
            self._call("weftShardScheduleEndStep", self.handle)
        finally:
            self._keep = []

    def state(self):
        """{"order_length", "gathered", "max_gathered"}."""
        vals = [ctypes.c_int() for _ in range(3)]
        self._call("weftShardScheduleGetState", self.handle, *[ctypes.byref(v) for v in vals])
        return dict(zip(("order_length", "gathered", "max_gathered"), (v.value for v in vals)))

    def destroy(self):
        if self._h is not None:
            h, self._h = self._h, None
            self._call("weftShardScheduleDestroy", h)

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

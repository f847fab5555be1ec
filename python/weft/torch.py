"""PyTorch adapter: DistributedDataParallel over weft's reducer.

    import weft.torch
    model = weft.torch.DistributedDataParallel(MyModel(), bucket_cap_mb=25)
    loss = model(x).sum(); loss.backward()   # gradients averaged over ranks
    with model.no_sync(): ...                # accumulate locally

The surface of torch.nn.parallel.DistributedDataParallel: forward, .module,
no_sync(), parameters (and buffers) broadcast from rank 0 at construction.
Each parameter's gradient accumulator gets a hook that marks the gradient
ready, so buckets are all-reduced on weft's stream while autograd computes
the earlier layers; a callback queued on the autograd engine finalizes at
the end of backward.

Host (CPU) modules run on a host communicator (MPI, in-process); CUDA
modules on a CUDA one (NCCL; comm=None: weft.init(device=<the parameters'
device>)), all parameters on one device. On CUDA each hook marks its
gradient ready on torch's current stream there (the stream autograd
computed it on: the reducer's stream waits for it with an event, the host
does not), and the end-of-backward callback finalizes on the stream that was
current at forward(), which then waits for the averages; any other stream a
gradient was produced on is made to wait for that one. Nothing synchronises
the device, as with torch's DDP over NCCL.

Gradient-as-bucket-view makes each .grad a tensor over the reducer's memory
(on CUDA, device memory: weft/_devices.py says how) without a copy. It holds
the reducer, so it stays valid after the wrapper is collected. As in torch,
gradients are views after the first iteration: the buckets are re-planned
once, at the end of the first synced backward, so until then each .grad is
torch's own tensor (averaged in place, through a copy), and only then does
it become its slot in the final buckets. A .grad taken during or before that
first backward is torch memory and stays valid, holding that step's average;
later steps write the new view, not it. Peak memory savings show from the
second iteration on.

Parameters at construction, and buffers at each forward (broadcast_buffers),
are rank 0's on every rank: any dtype (bool masks too) and any layout (a
non-contiguous buffer is written in place).
"""

import contextlib

import torch

from ._devices import _module_device, _tensor_at, _world_for
from ._sync import broadcast_state
from .reducer import Reducer

_COMM_DTYPES = {None: None, torch.float16: "float16", torch.bfloat16: "bfloat16",
                "float16": "float16", "bfloat16": "bfloat16"}


def _mib(mb):
    """Bytes of `mb` MiB; None (weft's default) stays None."""
    return None if mb is None else int(mb * (1 << 20))


class DistributedDataParallel(torch.nn.Module):
    def __init__(self, module, comm=None, bucket_cap_mb=None, find_unused_parameters=False,
                 gradient_as_bucket_view=False, static_graph=False, broadcast_buffers=True,
                 comm_dtype=None, first_bucket_cap_mb=None):
        super().__init__()
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.find_unused_parameters = find_unused_parameters
        seen = set()
        self._params, names = [], []
        for name, p in module.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                self._params.append(p)
                names.append(name)
        self._device = _module_device(list(module.named_parameters()), "DDP")
        self.comm = _world_for(comm, self._device, "DDP", names[0] if names else "(none)")
        self._cuda = self._device.type == "cuda"
        self._stream = None         # CUDA: the stream current at forward(), where finalize's averages land
        self._mark_streams = {}     # CUDA: other streams gradients were produced on, this backward
        broadcast_state(self.comm, module.named_parameters(), "DDP parameter")
        self._sync_buffers()
        self.reducer = Reducer(
            self.comm, [(p.numel(), p.dtype) for p in self._params], names=names,
            bucket_cap_bytes=_mib(bucket_cap_mb), first_bucket_cap_bytes=_mib(first_bucket_cap_mb),
            comm_dtype=_COMM_DTYPES[comm_dtype], find_unused=find_unused_parameters, static_graph=static_graph,
            gradient_as_bucket_view=gradient_as_bucket_view)
        self._require_sync = True
        self._queued = False
        # View mode: .grad becomes its bucket slot only once the layout is final (after the one re-plan at
        # the first synced finalize); a view over a bucket the re-plan frees would dangle in a user's hands.
        self._views = False
        self._marked = {}  # index -> the gradient tensor handed to the reducer, alive until finalize
        self._accumulators = []
        for i, p in enumerate(self._params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i))
            self._accumulators.append(acc)  # the hook lives as long as its node

    # ------------------------------------------------------------ torch DDP surface
    def forward(self, *inputs, **kwargs):
        if self._cuda:
            self._stream = torch.cuda.current_stream(self._device)
        if self.broadcast_buffers and self._require_sync:
            self._sync_buffers()
        return self.module(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards inside accumulate gradients locally; the first one after syncs the sum."""
        old = self._require_sync
        self._require_sync = False
        self.reducer.set_sync(False)
        try:
            yield
        finally:
            self._require_sync = old
            self.reducer.set_sync(old)

    # ------------------------------------------------------------ hooks
    def _sync_buffers(self):
        broadcast_state(self.comm, self.module.named_buffers(), "DDP buffer")

    def _slot(self, i):
        address, _ = self.reducer.grad_slot(i)
        p = self._params[i]
        return address, _tensor_at(address, p.numel(), p.dtype, self._device, owner=self.reducer).view_as(p)

    def _hook_stream(self):
        """CUDA: the stream autograd runs this hook on (where the gradient was produced)."""
        if not self._cuda:
            return None
        s = torch.cuda.current_stream(self._device)
        if self._stream is None:
            self._stream = s  # backward without a forward through this wrapper
        if s != self._stream:
            self._mark_streams[s.cuda_stream] = s
        return s

    def _make_hook(self, i):
        def hook(*unused):
            if not self._require_sync:
                return
            if not self._queued:
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._finalize_backward)
            p = self._params[i]
            g = p.grad
            stream = self._hook_stream()
            if self._views:
                address, view = self._slot(i)
                if g.data_ptr() != address:  # first step, or autograd replaced it: adopt the slot
                    view.copy_(g)
                    p.grad = view
                self.reducer.mark_ready_ptr(i, address, stream)
                self._marked[i] = p.grad
            else:
                if not g.is_contiguous():
                    g = p.grad = g.contiguous()
                self.reducer.mark_ready(i, g, stream)
                self._marked[i] = g  # only once the reducer holds it: a refused mark keeps the earlier one
        return hook

    def _finalize_backward(self):
        if not self._cuda:
            return self._finalize()
        # The engine may run this on a device thread whose current stream is not the caller's.
        with torch.cuda.stream(self._stream):
            self._finalize()
            for s in self._mark_streams.values():
                s.wait_stream(self._stream)
            self._mark_streams = {}
        return None

    def _finalize(self):
        self._queued = False
        version = self.reducer.layout_version
        # A refused finalize changes nothing: the reducer still holds its marked gradients, so they stay
        # alive here (whatever the caller does with p.grad) until a finalize goes through.
        self.reducer.finalize(self._stream)
        marked, self._marked = self._marked, {}
        if self.find_unused_parameters:
            for i, p in enumerate(self._params):
                if i in marked or not self.reducer.grad_used(i):
                    continue  # done, or unused everywhere: left as it was
                _, view = self._slot(i)  # used on another rank: its average lives in the slot
                if p.grad is None:
                    p.grad = view if self._views else view.clone()
                else:
                    p.grad.copy_(view)
        if self.gradient_as_bucket_view and not self._views:
            self._adopt_slots()
        elif self._views and self.reducer.layout_version != version:
            # The reducer re-plans only at its first synced finalize, where the views are first handed out;
            # should it ever do so later, the values were carried over into the new slots.
            for i, p in enumerate(self._params):
                if p.grad is not None:
                    p.grad = self._slot(i)[1]

    def _adopt_slots(self):
        """The layout is final: each .grad becomes its slot from here on. The tensor a caller may hold
        keeps its own memory and this step's average; the slot gets a copy."""
        self._views = True
        for i, p in enumerate(self._params):
            if p.grad is not None:
                address, view = self._slot(i)
                if p.grad.data_ptr() != address:
                    view.copy_(p.grad)
                    p.grad = view


# FSDP / ZeRO over shard groups (weft/_fsdp.py).
from ._fsdp import FullyShardedDataParallel, MixedPrecision  # noqa: E402,F401


# `import weft.torch` makes "weft" a torch.distributed backend.
from ._backend import register as _register_backend  # noqa: E402

_register_backend()

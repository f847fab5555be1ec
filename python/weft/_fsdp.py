"""PyTorch adapter: FullyShardedDataParallel (FSDP, ZeRO-1/2/3) over weft's shard groups.

    import weft.torch
    model = weft.torch.FullyShardedDataParallel(
        Transformer(), zero_stage=3,
        mixed_precision=weft.torch.MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    opt = torch.optim.AdamW(model.parameters())     # this rank's fp32 shards, in every stage
    loss = model(x).sum(); loss.backward(); opt.step()
    state = model.full_state_dict()                 # rank 0: the module's own keys, full fp32

Units (weft/_units.py says how they are chosen, as torch FSDP's auto-wrap:
containers such as nn.ModuleList are recursed into; `wrap_classes` names
block classes, e.g. [LlamaDecoderLayer] or ["LlamaDecoderLayer"]). Each unit
is one shard group; the parameters left over (the root's own, those of
modules outside any unit, and those shared by two units) form the root unit,
gathered for the whole step. A unit's parameters are removed from their modules and replaced
by views into one full buffer per unit, which this adapter owns: reshard
frees the buffer's storage (resize to 0) and unshard restores it and has
weft all-gather into it, so the tensors autograd saved in forward see the
gathered values again in backward. While a unit is resharded its modules
hold empty placeholders: a parameter read outside its unit's forward fails
with an error naming the units not gathered.

Step. A weft shard schedule (weft.shard.ShardSchedule, weftShardSchedule_t)
drives the units: before a unit's forward it waits for the unit's all-gather
and starts the next unit's, in the order declared or recorded in the first
forward, so the next gather overlaps this unit's compute (at most two units
gathered); zero_stage=3 reshards after the forward; before a unit's backward
(a hook on its outputs) it gathers it again and prefetches the unit before
it; when autograd has produced all of the unit's gradients they are
reduce-scattered (averaged, cast to reduce_dtype) into the fp32 gradient
shard on weft's stream and the unit resharded. The schedule gathers into
this adapter's full buffers through its acquire/release callbacks. A callback
at the end of backward reduces units whose gradients did not all arrive
(unused parameters count as zero), ends the schedule's step (waits for the
stream) and hands the gradient shards to the shard parameters' .grad. Stages
1 and 2 keep the parameters gathered through the step, re-gathering the
updated shards at the next; stage 1 all-reduces gradients instead of
reduce-scattering. The root unit is gathered for the whole step outside the
schedule.

Checkpoints. full_state_dict / load_full_state_dict move full fp32
parameters; full_optim_state_dict / load_full_optim_state_dict move an
optimizer's state (AdamW's exp_avg and exp_avg_sq are shaped like the shards)
keyed by the module's parameter names; one unit is materialised at a time.

Every rank must run the same units in the same order (static graph), as in
torch's FSDP.

Devices. A host (CPU) module runs on a host communicator, its gathers and
reductions on a weft.Stream. A CUDA module (all parameters on one device)
runs on a CUDA communicator (comm=None: weft.init(device=<that device>)):
the shard groups and the schedule are on CUDA memory, .parameters() are
torch CUDA tensors over weft's device shards (zero-copy, see weft/torch.py),
the full buffers are torch CUDA tensors this adapter owns, and the stream
current at construction is the compute stream handed to weft: forward must
run on it (checked). Nothing waits on the host in a step: weft's schedule
gathers and reduces on a stream of its own, ordered against that stream by
events. The checkpoint calls synchronise it, then move full tensors through
host memory: full_state_dict and full_optim_state_dict return CPU tensors
(as torch FSDP's offload_to_cpu), and the load calls accept CPU or CUDA ones.
"""

import torch

from .shard import ShardGroup, ShardSchedule
from .stream import Stream
from . import _optim_state
from ._devices import _module_device, _world_for
from ._sync import broadcast_state
from ._units import plan_units

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class MixedPrecision:
    """param_dtype: the dtype parameters are gathered in and computed with (the
    master shards stay float32); reduce_dtype: the dtype gradients are reduced in."""

    def __init__(self, param_dtype=None, reduce_dtype=None):
        self.param_dtype = param_dtype or torch.float32
        self.reduce_dtype = reduce_dtype or torch.float32
        for what, dt in (("param_dtype", self.param_dtype), ("reduce_dtype", self.reduce_dtype)):
            if dt not in _DTYPE_NAMES:
                raise ValueError("weft FSDP: %s %s is not float32, bfloat16 or float16" % (what, dt))


class _Unit:
    """One shard group: its parameters' owners, the weft group, the full buffer and its views.

    While the buffer is freed, the owners' attributes hold empty placeholders instead of the views: a
    parameter read outside its unit's forward then fails with a shape error (which the adapter's forward
    names the unit in) instead of reading freed memory."""

    def __init__(self, index, name, module, members, comm, layout, mp, reduction, replicas, device):
        # members: ([(owner, attr, qualname), ...], param); entries: (owner, attr, qualname, param), the first
        # name of each (the group's, the optimizer state's); quals: every name a parameter has (tied ones).
        self.index, self.name, self.module = index, name, module
        self.entries = [names[0] + (p,) for names, p in members]
        self.quals = [[q for _, _, q in names] for names, _ in members]
        entries = self.entries
        self.group = ShardGroup(comm, [tuple(p.shape) for _, _, _, p in entries],
                                names=[q for _, _, q, _ in entries], layout=layout,
                                param_dtype=_DTYPE_NAMES[mp.param_dtype], reduce_dtype=_DTYPE_NAMES[mp.reduce_dtype],
                                reduction=reduction, replicas=replicas)
        with torch.no_grad():
            fulls = [p.detach().to(torch.float32).contiguous() for _, _, _, p in entries]
            if device is not None:  # load_full reads them on the group's own stream
                torch.cuda.current_stream(device).synchronize()
            self.group.load_full(fulls)
        self.master, self.grad = self.group.shard_tensors(device)
        self.shard_param = torch.nn.Parameter(self.master)
        numel, offsets = self.group.full_layout()
        self.full = torch.empty(numel, dtype=mp.param_dtype, device=device)
        self.views, self.slots = [], []  # slots: (owner, attr, index into views), one per distinct place
        for (names, p), off in zip(members, offsets):
            v = self.full[off:off + p.numel()].view(p.shape)
            v.requires_grad_(p.requires_grad)
            for owner, attr, _ in names:
                if attr in owner._parameters:  # a module shared by two paths lists its place twice
                    del owner._parameters[attr]
                    self.slots.append((owner, attr, len(self.views)))
            self.views.append(v)
        self.placeholders = [torch.empty((0,) * v.dim(), dtype=mp.param_dtype, device=device) for v in self.views]
        self.gathered = False
        self.alloc()          # the buffer holds memory (freed by the adapter's __init__)
        self.pending = {}     # param index -> gradient, this backward
        self.reduced = False
        self.hooked_backward = False

    def describe(self):
        return "%s (%s)" % (self.name or "the root", type(self.module).__name__)

    def _storage(self):
        # torch >= 2.0 resizes untyped storage in bytes; 1.13's typed storage in elements.
        if hasattr(self.full, "untyped_storage"):
            return self.full.untyped_storage(), self.full.numel() * self.full.element_size()
        return self.full.storage(), self.full.numel()

    def _show(self, views):
        for owner, attr, i in self.slots:
            setattr(owner, attr, self.views[i] if views else self.placeholders[i])

    def free(self):
        """Releases the full buffer's memory; the views (and autograd's saved tensors) keep the storage object."""
        storage, _ = self._storage()
        storage.resize_(0)
        self.gathered = False
        self._show(False)

    def alloc(self):
        if not self.gathered:
            storage, size = self._storage()
            storage.resize_(size)
            self.gathered = True
            self._show(True)


class FullyShardedDataParallel(torch.nn.Module):
    def __init__(self, module, comm=None, zero_stage=3, mixed_precision=None, wrap_classes=None, layout="flat",
                 replicas=None, prefetch=True):
        super().__init__()
        if zero_stage not in (1, 2, 3):
            raise ValueError("weft FSDP: zero_stage=%r (expected 1, 2 or 3)" % (zero_stage,))
        unit_modules, params = plan_units(module, wrap_classes)  # refusals before any collective
        named = list(module.named_parameters())
        self._device = _module_device(named, "FSDP")
        self.comm = _world_for(comm, self._device, "FSDP", named[0][0] if named else "(none)")
        self._cuda = self._device.type == "cuda"
        self.zero_stage, self.prefetch = zero_stage, prefetch
        self.mp = mixed_precision or MixedPrecision()
        # Host: weft's stream; CUDA: the caller's compute stream.
        self._stream = torch.cuda.current_stream(self._device) if self._cuda else Stream()
        self._state_keys = list(module.state_dict().keys())  # before the parameters move into units
        # Every rank starts from rank 0's values, as torch's FSDP: parameters and every buffer (bool masks too).
        broadcast_state(self.comm, named, "FSDP parameter")
        broadcast_state(self.comm, module.named_buffers(), "FSDP buffer")
        self._sync()  # the groups load the broadcast values on a stream of their own
        members = [[] for _ in range(len(unit_modules) + 1)]  # the root unit last: what no unit claimed
        for home, names, p in params:
            members[len(unit_modules) if home is None else home].append((names, p))
        self._units = []
        reduction = "all_reduce" if zero_stage == 1 else "reduce_scatter"
        for (name, um), mine in zip(unit_modules + [("", module)], members):
            if mine:
                unit = _Unit(len(self._units), name, um, mine, self.comm, layout, self.mp, reduction, replicas,
                             self._device if self._cuda else None)
                self._units.append(unit)
        self._root = self._units[-1] if self._units and self._units[-1].module is module else None
        self.module = module
        self._shards = torch.nn.ParameterList([u.shard_param for u in self._units])
        for u in self._units:
            if u is not self._root:
                u.module.register_forward_pre_hook(self._make_pre_forward(u))
                u.module.register_forward_hook(self._make_post_forward(u))
            for i, v in enumerate(u.views):
                if v.requires_grad:
                    v.register_hook(self._make_grad_hook(u, i))
        self._by_group = {u.group: u for u in self._units}
        self._schedule = ShardSchedule(self._stream, reshard_after_forward=zero_stage == 3, prefetch=prefetch,
                                       acquire=self._acquire, release=self._release,
                                       memory="cuda" if self._cuda else "host")
        self._in_step = False
        self._in_backward = False
        for u in self._units:
            u.free()

    def _sync(self):
        """CUDA: the host waits for the compute stream (before weft's blocking calls read what it wrote)."""
        if self._cuda:
            self._stream.synchronize()

    # ---------------------------------------------------------------- the schedule's memory

    def _acquire(self, group, nbytes):
        """The schedule gathers a unit into its own full buffer (autograd's saved views see it)."""
        unit = self._by_group[group]
        unit.alloc()
        if nbytes != unit.full.numel() * unit.full.element_size():
            raise RuntimeError("weft FSDP: unit %d: the schedule asks %d bytes, the buffer has %d" %
                               (unit.index, nbytes, unit.full.numel() * unit.full.element_size()))
        return unit.full.data_ptr()

    def _release(self, group, address):
        self._by_group[group].free()

    def _begin_step(self):
        if self._in_step:  # a forward without backward (evaluation) left its step open
            self._end_step()
        self._schedule.begin_step()
        self._in_step = True

    def _end_step(self):
        self._in_step = False
        self._schedule.end_step()

    # ---------------------------------------------------------------- hooks

    def _make_pre_forward(self, unit):
        def hook(module, inputs):
            self._schedule.pre_forward(unit.group)
        return hook

    def _make_post_forward(self, unit):
        def hook(module, inputs, output):
            self._schedule.post_forward(unit.group)  # stage 3: reshard; backward gathers again
            if torch.is_grad_enabled():
                unit.hooked_backward = False
                for t in _tensors_in(output):
                    if t.requires_grad:
                        t.register_hook(self._make_pre_backward(unit))
            return output
        return hook

    def _make_pre_backward(self, unit):
        def hook(grad):
            self._start_backward()
            if not unit.hooked_backward:
                unit.hooked_backward = True
                self._schedule.pre_backward(unit.group)
            return grad
        return hook

    def _make_grad_hook(self, unit, i):
        def hook(grad):
            self._start_backward()
            unit.pending[i] = grad.detach().contiguous()
            if len(unit.pending) == sum(1 for v in unit.views if v.requires_grad):
                self._reduce(unit)
            return grad
        return hook

    def _start_backward(self):
        if not self._in_backward:
            self._in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)

    def _reduce(self, unit):
        if unit.reduced:
            return
        grads = []
        for i, v in enumerate(unit.views):
            g = unit.pending.get(i)
            grads.append(g if g is not None else torch.zeros(v.shape, dtype=v.dtype, device=v.device))
        unit.reduced = True
        unit.pending = {}
        if unit is self._root and not self._cuda:
            unit.keep = grads  # alive until the stream has run
            unit.group.reduce_grads(grads, stream=self._stream)
        else:
            # CUDA: the root's reduction too goes on the schedule's stream, after its others on the same
            # communicator, rather than on the compute stream beside them (weft.h: no other collectives
            # on the groups' communicators from elsewhere during a step).
            if not unit.hooked_backward:
                # Its backward never ran (outputs unused, or no forward this step): the schedule's
                # post_backward follows a pre_backward of the group.
                unit.hooked_backward = True
                self._schedule.pre_backward(unit.group)
            self._schedule.post_backward(unit.group, grads)  # keeps grads; stage 3: reshards

    def _end_backward(self):
        for unit in reversed(self._units):  # reverse registration order: the order ranks agree on
            if not unit.reduced:
                self._reduce(unit)
        self._end_step()  # waits for the stream, root's reduction included
        for unit in self._units:
            unit.keep = None
            unit.reduced = False
            unit.hooked_backward = False
            for v in unit.views:
                v.grad = None
            if unit.shard_param.grad is None or unit.shard_param.grad.data_ptr() != unit.grad.data_ptr():
                unit.shard_param.grad = unit.grad
        if self.zero_stage == 3 and self._root is not None:
            self._root.free()
        self._in_backward = False

    # ---------------------------------------------------------------- forward and state

    def forward(self, *args, **kwargs):
        if self._cuda and torch.cuda.current_stream(self._device) != self._stream:
            raise ValueError("weft FSDP: forward runs on %s, but the wrapper was made on %s: weft's schedule orders "
                             "its gathers against the stream current at construction" %
                             (torch.cuda.current_stream(self._device), self._stream))
        for unit in self._units:
            # A gradient shard the optimizer set to None restarts from zero.
            if unit.shard_param.grad is None:
                if self._cuda:
                    unit.grad.zero_()  # on the compute stream, before this step's reductions
                else:
                    unit.group.zero_grads()
        self._begin_step()
        if self._root is not None:
            # The shards may have been updated since the last gather.
            self._root.alloc()
            self._root.group.unshard_into(self._root.full.data_ptr(), stream=self._stream if self._cuda else None)
        if self.mp.param_dtype != torch.float32:
            args = tuple(_cast(a, self.mp.param_dtype) for a in args)
            kwargs = {k: _cast(v, self.mp.param_dtype) for k, v in kwargs.items()}
        try:
            return self.module(*args, **kwargs)
        except RuntimeError as e:
            if type(e) is not RuntimeError:
                raise
            missing = [u.describe() for u in self._units if not u.gathered]
            if not missing:
                raise
            listed = ", ".join(missing[:4]) + (" and %d more" % (len(missing) - 4) if len(missing) > 4 else "")
            raise RuntimeError("weft FSDP: the forward failed while %s %s not gathered: %s. If that is a shape "
                               "error on an empty tensor, a unit's parameters were read outside the unit's own "
                               "forward (module(x)): make the module that reads them the unit (wrap_classes) or "
                               "leave that unit out" % (listed, "was" if len(missing) == 1 else "were",
                                                       str(e).rstrip("."))) from e

    def _close_step(self):
        """Checkpoint calls run between steps: close one a forward left open."""
        if self._in_step and not self._in_backward:
            self._end_step()
        self._sync()  # the optimizer may still be updating the shards

    def full_state_dict(self, rank0_only=True):
        """The wrapped module's state dict with full fp32 parameters: on rank 0 (every rank with
        rank0_only=False); other ranks get {}. Collective; one unit is gathered at a time."""
        self._close_step()
        root = 0 if rank0_only else -1
        mine = not rank0_only or self.comm.rank == 0
        params = {}
        for unit in self._units:
            outs = [torch.empty(p.numel(), dtype=torch.float32) for _, _, _, p in unit.entries]  # host
            unit.group.gather_full(outs if mine else [], root=root)
            for (_, _, _, p), quals, o in zip(unit.entries, unit.quals, outs):
                for qual in quals:  # a tied parameter under each of its names, as the module's state_dict
                    params[qual] = o.view(p.shape)
        if not mine:
            return {}
        rest = self.module.state_dict()  # buffers and anything not sharded
        return {key: params[key] if key in params else rest[key].detach().to("cpu", copy=True)
                for key in self._state_keys}

    def load_full_state_dict(self, state, root=0):
        """Inverse of full_state_dict: root's full fp32 parameters become every rank's shards (state is
        only read on root). Collective; one unit at a time. The next forward gathers the new values."""
        self._close_step()
        for unit in self._units:
            fulls = [state[q].detach().to("cpu", torch.float32).contiguous().view(-1) for _, _, q, _ in unit.entries] \
                if self.comm.rank == root else []
            unit.group.scatter_full(fulls, root=root)

    def full_optim_state_dict(self, optimizer, rank0_only=True):
        """The optimizer's state for this module's parameters, full and keyed by parameter name:
        {"state": {name: {key: value}}, "param_groups": [{..., "params": [names]}]}, on rank 0 (every rank
        with rank0_only=False); other ranks get {}. `optimizer` was built on .parameters(). State tensors
        shaped like a shard (AdamW's exp_avg, exp_avg_sq) are gathered to full parameter shapes, one unit
        at a time; other entries (step) are the same on every rank and copied. Collective."""
        return _optim_state.gather(self, optimizer, rank0_only)

    def load_full_optim_state_dict(self, optimizer, state, root=0):
        """Inverse of full_optim_state_dict: root's full optimizer state becomes every rank's shard state in
        `optimizer` (built on .parameters()); `state` is only read on root. Collective; one unit at a time."""
        _optim_state.scatter(self, optimizer, state, root)

    def memory(self):
        """Bytes this rank holds: shards, gradient shards, gathered full buffers."""
        shard = sum(u.master.numel() * 4 for u in self._units)
        full = sum(u.full.numel() * u.full.element_size() for u in self._units if u.gathered)
        return {"shard_bytes": shard, "grad_shard_bytes": shard, "full_bytes": full}


def _tensors_in(x):
    if torch.is_tensor(x):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors_in(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors_in(y)


def _cast(x, dtype):
    if torch.is_tensor(x) and x.is_floating_point():
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(y, dtype) for y in x)
    return x

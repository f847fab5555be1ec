"""Where a PyTorch module runs, for the adapters (weft/torch.py, weft/_fsdp.py):
the one device of its parameters, the world communicator of that device's
memory kind, and torch tensors over memory weft owns (bucket slots, shards).

    device = _module_device(module.named_parameters(), "DDP")   # cpu or cuda:N
    comm = _world_for(None, device, "DDP", "fc.weight")          # weft.init(device=N) for CUDA
    grad = _tensor_at(address, count, torch.float32, device, owner=reducer)   # no copy; holds reducer

CUDA memory is wrapped through the CUDA Array Interface: torch.as_tensor of
an object exposing `nbytes` at `address` as uint8 on the memory's device,
then .view(dtype) (numpy's typestrs, which torch parses, have no bfloat16).
This path exists in PyTorch 1.13 and 2.x alike and needs numpy (as any
torch.as_tensor of a CUDA array does); the result is checked to alias the
address, so a mismatch raises instead of handing out a detached copy.
"""

import ctypes

import torch

from ._tensors import kind_mismatch, torch_kind
from .comm import init


class _CudaBytes:
    """Just enough of the CUDA Array Interface for torch.as_tensor to alias `nbytes` at `address`.
    torch holds this object as long as the tensor's storage lives, and this object holds `owner`."""

    def __init__(self, address, nbytes, owner):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "strides": None, "version": 2}
        self.owner = owner


def _host_bytes(address, nbytes, owner):
    """A ctypes view of `nbytes` at `address` that holds `owner` (torch.frombuffer holds the view)."""
    view = (ctypes.c_char * nbytes).from_address(address)
    view._weft_owner = owner
    return view


def _tensor_at(address, count, dtype, device=None, owner=None):
    """A tensor over weft-owned memory (a bucket slot, a shard); it does not own the memory, but its
    storage holds `owner` (the Python object whose destruction frees it: a Reducer, a ShardGroup), so the
    memory stays valid for as long as the tensor or any view of it lives, whatever the caller drops.
    device: None or a CPU device for host memory; the CUDA device the memory is on otherwise."""
    device = torch.device("cpu") if device is None else torch.device(device)
    if count == 0:
        return torch.empty(0, dtype=dtype, device=device)
    nbytes = count * torch.empty(0, dtype=dtype).element_size()
    if device.type == "cpu":
        return torch.frombuffer(_host_bytes(address, nbytes, owner), dtype=dtype, count=count)
    raw = torch.as_tensor(_CudaBytes(address, nbytes, owner), device=device)
    if raw.data_ptr() != address:  # torch placed it elsewhere: a copy would silently detach from weft's memory
        raise RuntimeError("weft: wrapping CUDA memory at 0x%x as a tensor on %s gave a copy at 0x%x (is the "
                           "memory on another device?)" % (address, device, raw.data_ptr()))
    return raw.view(dtype)


def _module_device(named_params, what):
    """The one device of a module's parameters (a torch.device); ValueError naming a parameter elsewhere."""
    device, first = None, None
    for name, p in named_params:
        torch_kind(p, "%s parameter %s" % (what, name))
        if p.layout != torch.strided:
            raise ValueError("weft %s: parameter %s is %s; dense (strided) tensors only" % (what, name, p.layout))
        if device is None:
            device, first = p.device, name
        elif p.device != device:
            raise ValueError("weft %s: parameter %s is on %s but %s on %s; put the module on one device" %
                             (what, name, p.device, first, device))
    return device or torch.device("cpu")


def _world_for(comm, device, what, name):
    """comm, or the world communicator of the device's memory kind; ValueError when the kinds differ."""
    cuda = device.type == "cuda"
    if comm is None:
        comm = init(device=device.index if device.index is not None else "cuda") if cuda else init()
    kind = "cuda" if cuda else "host"
    if comm.memory != kind:
        raise kind_mismatch("%s parameter %s" % (what, name), device, kind, comm.memory)
    if cuda and comm.device is not None and device.index != comm.device:
        raise ValueError("weft %s: parameter %s is on %s, but the communicator is on cuda:%d" %
                         (what, name, device, comm.device))
    return comm

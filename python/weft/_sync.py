"""Making every rank's module state rank 0's, for the adapters (weft/torch.py, weft/_fsdp.py).

    broadcast_state(comm, module.parameters(), "DDP parameter")   # each tensor: rank 0's values

A broadcast moves bytes, so any dtype goes as its bytes (uint8): bool causal
masks, uint8 and int16 buffers, complex ones, alike. A tensor that is not
contiguous (a transposed or sliced buffer) is broadcast through a contiguous
copy that is then written back into it, so the module's own tensor changes,
not a temporary. Every rank must pass the same tensors in the same order
(shapes and dtypes are the module's, the same everywhere).
"""

import torch


def _bytes_of(t):
    """A uint8 view of a contiguous tensor's bytes (0-d tensors included)."""
    return t.reshape(-1).view(torch.uint8)


def broadcast_tensor(comm, t, root=0, what="tensor"):
    """t = root's t, in place, whatever its dtype and strides."""
    if t.layout != torch.strided:
        raise ValueError("weft: %s is %s; only dense (strided) tensors can be broadcast" % (what, t.layout))
    if t.numel() == 0:
        return t
    with torch.no_grad():
        if t.is_contiguous():
            comm.broadcast(_bytes_of(t.data), root=root)
        else:
            tmp = t.data.contiguous()
            comm.broadcast(_bytes_of(tmp), root=root)
            t.data.copy_(tmp)
    return t


def broadcast_state(comm, named, what, root=0):
    """Broadcasts each (name, tensor) of `named` from root; `what` names them in errors
    ("DDP buffer" -> "weft: DDP buffer mask is ...")."""
    seen = set()
    for name, t in named:
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        broadcast_tensor(comm, t, root, "%s %s" % (what, name))

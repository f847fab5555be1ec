"""What the C ABI needs from a torch tensor or a numpy array: address, element
count and weftDataType_t, the memory kind it lives in, and the stream a call
on it is enqueued on. torch and numpy are imported only if the caller passes
their objects (torch.cuda only for CUDA tensors).

Memory kinds are the communicator's (weftMemoryKind_t): "host" (CPU tensors,
numpy arrays) or "cuda" (torch CUDA tensors). A tensor of the other kind is
refused here with a ValueError naming it and both kinds, before any C call:

    describe(grad, "grad", memory=comm.memory)     # -> (address, count, dtype)
    stream_handle(None, "cuda", grad.device)       # torch's current stream there
"""

import sys

# Indexed by weftDataType_t (include/weft/types.h): int16 was appended after int64.
DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64", "int16")
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
MEMORY_KINDS = ("host", "cuda")  # indexed by weftMemoryKind_t
_KIND_WORDS = {"host": "host (CPU) memory", "cuda": "CUDA memory"}


def _torch_code(t):
    import torch
    table = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int8: 4,
             torch.uint8: 5, torch.int32: 6, torch.int64: 7, torch.int16: 8}
    if t.dtype not in table:
        raise TypeError("weft: torch dtype %s is not supported (one of %s)" % (t.dtype, ", ".join(DTYPES)))
    return table[t.dtype]


def torch_kind(t, what="tensor"):
    """"host" or "cuda" for a torch tensor; a ValueError for any other device (meta, mps, xla...)."""
    if t.device.type == "cpu":
        return "host"
    if t.device.type == "cuda":
        return "cuda"
    raise ValueError("weft: %s is on %s; weft drives host (CPU) and CUDA memory only" % (what, t.device))


def kind_mismatch(what, where, kind, memory):
    """The refusal for a tensor of one memory kind given to a communicator (or group) of the other."""
    if kind == "cuda":
        fix = "make the communicator with weft.init(backend=\"nccl\") or weft.init(device=...), or pass %s.cpu()" % what
    else:
        fix = "move it to the communicator's device (%s.cuda()) or use a host communicator" % what
    return ValueError("weft: %s is in %s (%s), but the communicator is on %s: %s" %
                      (what, _KIND_WORDS[kind], where, _KIND_WORDS[memory], fix))


def describe(x, what="tensor", memory="host"):
    """(address, count, dtype code) of a contiguous torch tensor or numpy array.

    memory: the communicator's kind, "host" or "cuda"; None accepts either
    (calls whose buffers may be host or device memory, as checkpoint gathers)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        kind = torch_kind(x, what)
        if memory is not None and kind != memory:
            raise kind_mismatch(what, x.device, kind, memory)
        if not x.is_contiguous():
            raise ValueError("weft: %s is not contiguous" % what)
        return x.data_ptr(), x.numel(), _torch_code(x)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        if memory == "cuda":
            raise kind_mismatch(what, "numpy.ndarray", "host", memory)
        if not x.flags["C_CONTIGUOUS"]:
            raise ValueError("weft: %s is not C-contiguous" % what)
        name = x.dtype.name
        if name not in DTYPES:
            raise TypeError("weft: numpy dtype %s is not supported (one of %s)" % (name, ", ".join(DTYPES)))
        if not x.flags["WRITEABLE"]:
            raise ValueError("weft: %s is read-only" % what)
        if not x.dtype.isnative:
            # weft reads the bytes in this machine's order: the sums would be of other numbers.
            raise ValueError("weft: %s has non-native byte order (dtype %s); convert it first, e.g. "
                             "x.astype(x.dtype.newbyteorder(\"=\"))" % (what, x.dtype.str))
        return x.ctypes.data, x.size, DTYPES.index(name)
    raise TypeError("weft: %s must be a torch.Tensor or numpy.ndarray, not %s" % (what, type(x).__name__))


def stream_handle(stream, memory, device=None, what="stream"):
    """The `void* stream` of a C call.

    Host memory: None (the call blocks) or a weft.Stream (enqueued).
    CUDA memory: a torch.cuda.Stream, an int cudaStream_t, or None for
    torch's current stream on `device` (the tensor's device), so the call is
    ordered after the work already queued there, as torch.distributed's NCCL
    backend is."""
    if memory == "host":
        if stream is None:
            return None
        from .stream import Stream
        if isinstance(stream, Stream):
            return stream.handle
        raise ValueError("weft: %s = %r on host memory: pass None (the call blocks) or a weft.Stream" %
                         (what, stream))
    if isinstance(stream, bool):
        raise ValueError("weft: %s = %r is not a CUDA stream" % (what, stream))
    if isinstance(stream, int):
        return stream or None  # 0 is the legacy default stream, as NULL
    if stream is None:
        import torch
        return torch.cuda.current_stream(device).cuda_stream or None
    if hasattr(stream, "cuda_stream") and hasattr(stream, "device"):
        if device is not None and _ordinal(stream.device) != _ordinal(device):
            raise ValueError("weft: %s is on %s, but the tensors are on %s" % (what, stream.device, device))
        return stream.cuda_stream or None
    raise ValueError("weft: %s = %r on CUDA memory: pass a torch.cuda.Stream, an int cudaStream_t or None "
                     "(torch's current stream)" % (what, stream))


def keep_alive(stream, *objs):
    """Host work enqueued on a weft.Stream reads and writes its tensors later, on the stream's thread:
    the stream holds them until it is synchronised (or found idle), so a caller that drops them
    does not free memory the work still uses."""
    from .stream import Stream
    if isinstance(stream, Stream):
        stream._hold(objs)


def _ordinal(device):
    index = getattr(device, "index", device)
    if index is None:
        import torch
        return torch.cuda.current_device()
    return int(index)


def dtype_code(dtype):
    """A weftDataType_t from a torch dtype, numpy dtype or name."""
    if isinstance(dtype, str):
        return DTYPES.index(dtype)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        return _torch_code(torch.empty(0, dtype=dtype))
    import numpy as np
    return DTYPES.index(np.dtype(dtype).name)


def op_code(op):
    if op not in OPS:
        raise ValueError("weft: op %r is not one of %s" % (op, ", ".join(OPS)))
    return OPS[op]

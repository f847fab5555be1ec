"""What the C ABI needs from a torch tensor or a numpy array: address, element
count and weftDataType_t. Both must be contiguous host memory; torch and numpy
are imported only if the caller passes their objects."""

import sys

DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64")
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


def _torch_code(t):
    import torch
    table = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3, torch.int8: 4,
             torch.uint8: 5, torch.int32: 6, torch.int64: 7}
    if t.dtype not in table:
        raise TypeError("weft: torch dtype %s is not supported (one of %s)" % (t.dtype, ", ".join(DTYPES)))
    return table[t.dtype]


def describe(x, what="tensor"):
    """(address, count, dtype code) of a contiguous host torch tensor or numpy array."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise ValueError("weft: %s is on %s; this package drives host memory" % (what, x.device))
        if not x.is_contiguous():
            raise ValueError("weft: %s is not contiguous" % what)
        return x.data_ptr(), x.numel(), _torch_code(x)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.ndarray):
        if not x.flags["C_CONTIGUOUS"]:
            raise ValueError("weft: %s is not C-contiguous" % what)
        name = x.dtype.name
        if name not in DTYPES:
            raise TypeError("weft: numpy dtype %s is not supported (one of %s)" % (name, ", ".join(DTYPES)))
        if not x.flags["WRITEABLE"]:
            raise ValueError("weft: %s is read-only" % what)
        return x.ctypes.data, x.size, DTYPES.index(name)
    raise TypeError("weft: %s must be a torch.Tensor or numpy.ndarray, not %s" % (what, type(x).__name__))


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

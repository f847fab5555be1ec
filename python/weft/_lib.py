"""Loads libweft.so and declares the C ABI (include/weft/weft.h) for ctypes.

The library is looked for, in order:
  1. $WEFT_LIBRARY (a path to the .so; when set, nothing else is tried);
  2. next to this package (an installed weft, or a copy dropped beside it);
  3. the install's libdir, recorded by meson install in _install_dir.py;
  4. a meson build directory of the checkout this file lives in (build/, then
     any other build*/).
ctypes releases the GIL around every call, so collectives and reducer calls
made from several Python threads run concurrently.
"""

import ctypes
import glob
import operator
import os

SUCCESS = 0
IN_PROGRESS = 9


class WeftError(RuntimeError):
    """A weft call failed; .code is the weftResult_t, the message is weftGetLastError()."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libweft.so", "libweft.so.0"):
        yield os.path.join(here, name)
    try:
        from . import _install_dir  # written by meson install
        yield os.path.join(_install_dir.LIBDIR, "libweft.so.0")
    except ImportError:
        pass
    root = os.path.dirname(os.path.dirname(here))
    # build/ (the README's) first, then any other build*/ in name order.
    yield os.path.join(root, "build", "libweft.so.0")
    for path in sorted(glob.glob(os.path.join(root, "build*", "libweft.so.0"))):
        yield path


def _load():
    env = os.environ.get("WEFT_LIBRARY")
    if env:  # explicit: that library or a clear failure, never a silent fallback
        if not os.path.exists(env):
            raise OSError("weft: WEFT_LIBRARY=%s does not exist" % env)
        return ctypes.CDLL(env)
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return ctypes.CDLL(path)
        tried.append(path)
    raise OSError("weft: libweft.so not found; set WEFT_LIBRARY to its path (tried: %s)" % ", ".join(tried))


lib = _load()

c_int_p = ctypes.POINTER(ctypes.c_int)
c_void_pp = ctypes.POINTER(ctypes.c_void_p)

# ctypes stores a Python int that does not fit a C integer argument or field
# modulo its width, silently (root=2**32 + 1 would become root 1): every int
# passed to C goes through checked_int first.
_INT_TYPES = (ctypes.c_byte, ctypes.c_ubyte, ctypes.c_short, ctypes.c_ushort, ctypes.c_int, ctypes.c_uint,
              ctypes.c_long, ctypes.c_ulong, ctypes.c_longlong, ctypes.c_ulonglong)


def _int_range(ctype):
    bits = 8 * ctypes.sizeof(ctype)
    if ctype(-1).value < 0:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def checked_int(value, ctype, what):
    """value unchanged, or a ValueError naming `what` when it is an integer outside ctype's range."""
    if ctype not in _INT_TYPES or isinstance(value, ctypes._SimpleCData) or not hasattr(value, "__index__"):
        return value
    v = operator.index(value)
    lo, hi = _int_range(ctype)
    if not lo <= v <= hi:
        raise ValueError("weft: %s = %d does not fit a C %s (%d..%d)" % (what, v, ctype.__name__, lo, hi))
    return v


class Struct(ctypes.Structure):
    """A ctypes.Structure whose integer fields refuse values they cannot hold."""

    def __init__(self, *args, **kwargs):
        fields = [f[:2] for f in self._fields_]
        args = [checked_int(a, t, "%s.%s" % (type(self).__name__, n)) for a, (n, t) in zip(args, fields)]
        types = dict(fields)
        for n, v in kwargs.items():
            kwargs[n] = checked_int(v, types.get(n), "%s.%s" % (type(self).__name__, n))
        super().__init__(*args, **kwargs)

    def __setattr__(self, name, value):
        for f in self._fields_:
            if f[0] == name:
                value = checked_int(value, f[1], "%s.%s" % (type(self).__name__, name))
                break
        super().__setattr__(name, value)


class Config(Struct):
    """weftConfig_t."""
    _fields_ = [("size", ctypes.c_size_t), ("backend", ctypes.c_int), ("memory", ctypes.c_int),
                ("timeout_ms", ctypes.c_int), ("cuda_device", ctypes.c_int), ("segment_bytes", ctypes.c_size_t)]

    def __init__(self, backend=0, timeout_ms=0, memory=0, cuda_device=-1):
        super().__init__(ctypes.sizeof(Config), backend, memory, checked_int(timeout_ms, ctypes.c_int, "timeout_ms"),
                         cuda_device, 0)


class Tensor(Struct):
    """weftTensor_t."""
    _fields_ = [("data", ctypes.c_void_p), ("count", ctypes.c_size_t), ("dtype", ctypes.c_int)]


class ReducerConfig(Struct):
    """weftReducerConfig_t; defaults are WEFT_REDUCER_CONFIG_INITIALIZER's."""
    _fields_ = [("size", ctypes.c_size_t), ("bucket_cap_bytes", ctypes.c_size_t),
                ("first_bucket_cap_bytes", ctypes.c_size_t), ("comm_dtype", ctypes.c_int),
                ("find_unused", ctypes.c_int), ("static_graph", ctypes.c_int), ("rebuild_buckets", ctypes.c_int),
                ("gradient_as_bucket_view", ctypes.c_int), ("names", ctypes.POINTER(ctypes.c_char_p))]

    def __init__(self):
        super().__init__(ctypes.sizeof(ReducerConfig), 25 << 20, 1 << 20, -1, 0, 0, 1, 0, None)


_H = ctypes.c_void_p  # every opaque handle
_SIGNATURES = {
    "weftGetVersion": [c_int_p],
    "weftCommInitWorld": [c_void_pp, ctypes.POINTER(Config)],
    "weftCommInitInProcess": [c_void_pp, ctypes.c_int, ctypes.POINTER(Config)],
    "weftCommSplit": [_H, ctypes.c_int, ctypes.c_int, c_void_pp],
    "weftCommCount": [_H, c_int_p],
    "weftCommUserRank": [_H, c_int_p],
    "weftCommGetBackend": [_H, c_int_p],
    "weftCommGetMemoryKind": [_H, c_int_p],
    "weftCommGetCudaDevice": [_H, c_int_p],
    "weftCommGetAsyncError": [_H, c_int_p],
    "weftCommAbort": [_H],
    "weftCommDestroy": [_H],
    "weftAllReduce": [_H, _H, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _H, _H],
    "weftReduceScatter": [_H, _H, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _H, _H],
    "weftAllGather": [_H, _H, ctypes.c_size_t, ctypes.c_int, _H, _H],
    "weftBroadcast": [_H, _H, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _H, _H],
    "weftBarrier": [_H],
    "weftReducerCreate": [_H, ctypes.POINTER(Tensor), ctypes.c_int, ctypes.POINTER(ReducerConfig), c_void_pp],
    "weftReducerMarkReady": [_H, ctypes.c_int, _H, _H],
    "weftReducerMarkUnused": [_H, ctypes.c_int],
    "weftReducerFinalize": [_H, _H],
    "weftReducerSetSync": [_H, ctypes.c_int],
    "weftReducerDestroy": [_H],
    "weftReducerGetGradSlot": [_H, ctypes.c_int, c_void_pp, c_int_p],
    "weftReducerGetBucketCount": [_H, c_int_p],
    "weftReducerGetLayoutVersion": [_H, c_int_p],
    "weftReducerGetGradUsed": [_H, ctypes.c_int, c_int_p],
}
for _name, _args in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.argtypes = _args
    _fn.restype = ctypes.c_int
lib.weftGetLastError.argtypes = []
lib.weftGetLastError.restype = ctypes.c_char_p


def check(code):
    """Raises WeftError for anything but weftSuccess."""
    if code != SUCCESS:
        raise WeftError(code, lib.weftGetLastError().decode("utf-8", "replace"))


def call(name, *args):
    fn = getattr(lib, name)
    types = fn.argtypes or ()
    args = [checked_int(a, t, "%s argument %d" % (name, i + 1)) for i, (a, t) in enumerate(zip(args, types))] + \
        list(args[len(types):])
    check(fn(*args))

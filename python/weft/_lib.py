"""Loads libweft.so and declares the C ABI (include/weft/*.h) for ctypes: every struct and
function the package uses is declared here, once.

The library is looked for, in order:
  1. $WEFT_LIBRARY (a path to the .so; when set, nothing else is tried);
  2. next to this package (the wheel's, or a copy dropped beside it);
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


def _preload_ucx():
    """Loads the libucp of the libucx wheel (a dependency of the weft wheel), if installed, so that libweft's UCX
    backend, which opens libucp.so.0 when first used, finds that one already loaded: no system UCX is needed.
    WEFT_UCX_LIBRARY, when set, names the library instead."""
    if os.environ.get("WEFT_UCX_LIBRARY"):
        return
    try:
        import libucx
    except ImportError:  # a system UCX, if any, is found by the dynamic loader
        return
    libucx.load_library()


def _load():
    _preload_ucx()
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


# ---------------------------------------------------------------- structs
# Versioned structs (weft/types.h, "Structs") carry their size in `size`; each
# mirrors its C struct field for field, reserved fields included, so that size
# is the current one.

class Config(Struct):
    """weftConfig_t (versioned)."""
    _fields_ = [("size", ctypes.c_size_t), ("backend", ctypes.c_int), ("memory", ctypes.c_int),
                ("timeout_ms", ctypes.c_int), ("cuda_device", ctypes.c_int), ("segment_bytes", ctypes.c_size_t),
                ("bootstrap_timeout_ms", ctypes.c_int), ("reserved0", ctypes.c_int),
                ("wait", ctypes.c_int), ("reserved1", ctypes.c_int), ("trust_memory", ctypes.c_int),
                ("reserved2", ctypes.c_int)]

    def __init__(self, backend=0, timeout_ms=0, memory=0, cuda_device=-1, wait=0):
        super().__init__(ctypes.sizeof(Config), backend, memory, checked_int(timeout_ms, ctypes.c_int, "timeout_ms"),
                         cuda_device, 0, 0, 0, checked_int(wait, ctypes.c_int, "wait"), 0, 0, 0)


class KernelConfig(Struct):
    """weftKernelConfig_t (versioned); memory is MEMORY_AUTO (-1), 0 (host) or 1 (cuda)."""
    _fields_ = [("size", ctypes.c_size_t), ("memory", ctypes.c_int), ("reserved0", ctypes.c_int)]

    def __init__(self, memory=-1):
        super().__init__(ctypes.sizeof(KernelConfig), memory, 0)


class Tensor(Struct):
    """weftTensor_t (plain)."""
    _fields_ = [("data", ctypes.c_void_p), ("count", ctypes.c_size_t), ("dtype", ctypes.c_int)]


# WEFT_REDUCER_CONFIG_INITIALIZER's values: the one place Python spells them.
REDUCER_DEFAULTS = {"bucket_cap_bytes": 25 << 20, "first_bucket_cap_bytes": 1 << 20, "comm_dtype": -1,
                    "find_unused": 0, "static_graph": 0, "rebuild_buckets": 1, "gradient_as_bucket_view": 0}


class ReducerConfig(Struct):
    """weftReducerConfig_t (versioned); defaults are REDUCER_DEFAULTS."""
    _fields_ = [("size", ctypes.c_size_t), ("bucket_cap_bytes", ctypes.c_size_t),
                ("first_bucket_cap_bytes", ctypes.c_size_t), ("comm_dtype", ctypes.c_int),
                ("find_unused", ctypes.c_int), ("static_graph", ctypes.c_int), ("rebuild_buckets", ctypes.c_int),
                ("gradient_as_bucket_view", ctypes.c_int), ("names", ctypes.POINTER(ctypes.c_char_p))]

    def __init__(self):
        super().__init__(size=ctypes.sizeof(ReducerConfig), names=None, **REDUCER_DEFAULTS)


MAX_DIMS = 8  # WEFT_MAX_DIMS


class ParamDesc(Struct):
    """weftParamDesc_t (plain)."""
    _fields_ = [("name", ctypes.c_char_p), ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * MAX_DIMS)]


class ShardGroupConfig(Struct):
    """weftShardGroupConfig_t (versioned)."""
    _fields_ = [("size", ctypes.c_size_t), ("layout", ctypes.c_int), ("param_dtype", ctypes.c_int),
                ("reduce_dtype", ctypes.c_int), ("reduction", ctypes.c_int)]


class ShardDesc(ctypes.Structure):
    """weftShardDesc_t (plain, written by weft)."""
    _fields_ = [("param_offset", ctypes.c_size_t), ("length", ctypes.c_size_t), ("shard_offset", ctypes.c_size_t)]


class ShardMemory(ctypes.Structure):
    """weftShardMemory_t (plain, written by weft)."""
    _fields_ = [(n, ctypes.c_size_t) for n in ("shard_bytes", "grad_shard_bytes", "unsharded_bytes",
                                                "pool_live_bytes", "pool_cached_bytes", "pool_peak_bytes")]


ShardAcquireFn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
ShardReleaseFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class ScheduleConfig(Struct):
    """weftShardScheduleConfig_t (versioned)."""
    _fields_ = [("size", ctypes.c_size_t), ("reshard_after_forward", ctypes.c_int), ("prefetch", ctypes.c_int),
                ("acquire", ShardAcquireFn), ("release", ShardReleaseFn), ("user", ctypes.c_void_p),
                ("memory", ctypes.c_int), ("reserved0", ctypes.c_int)]


# ---------------------------------------------------------------- functions
# Every weft* function this package calls, as (restype, argtypes): the one
# place the package declares the C ABI (tests/python/test_bindings.py checks
# it against the headers and the package's calls).
_I, _SZ, _F = ctypes.c_int, ctypes.c_size_t, ctypes.c_float
_H = ctypes.c_void_p  # every opaque handle, and void* buffers and streams
_R = ctypes.c_int     # weftResult_t
_size_p = ctypes.POINTER(ctypes.c_size_t)
_float_p = ctypes.POINTER(ctypes.c_float)
_float_pp = ctypes.POINTER(_float_p)
_tensor_p = ctypes.POINTER(Tensor)
_kcfg_p = ctypes.POINTER(KernelConfig)
SIGNATURES = {
    # weft/types.h
    "weftGetVersion": (_R, [c_int_p]),
    "weftGetLastError": (ctypes.c_char_p, []),
    # weft/comm.h
    "weftCommInitWorld": (_R, [c_void_pp, ctypes.POINTER(Config)]),
    "weftCommInitInProcess": (_R, [c_void_pp, _I, ctypes.POINTER(Config)]),
    "weftCommSplit": (_R, [_H, _I, _I, c_void_pp]),
    "weftCommCount": (_R, [_H, c_int_p]),
    "weftCommUserRank": (_R, [_H, c_int_p]),
    "weftCommGetBackend": (_R, [_H, c_int_p]),
    "weftCommGetMemoryKind": (_R, [_H, c_int_p]),
    "weftCommGetCudaDevice": (_R, [_H, c_int_p]),
    "weftCommGetAsyncError": (_R, [_H, c_int_p]),
    "weftCommDestroy": (_R, [_H]),
    # weft/stream.h
    "weftStreamCreateWithFlags": (_R, [c_void_pp, ctypes.c_uint]),
    "weftStreamSynchronize": (_R, [_H]),
    "weftStreamQuery": (_R, [_H]),
    "weftStreamDestroy": (_R, [_H]),
    # weft/collectives.h
    "weftAllReduce": (_R, [_H, _H, _SZ, _I, _I, _H, _H]),
    "weftReduceScatter": (_R, [_H, _H, _SZ, _I, _I, _H, _H]),
    "weftAllGather": (_R, [_H, _H, _SZ, _I, _H, _H]),
    "weftBroadcast": (_R, [_H, _H, _SZ, _I, _I, _H, _H]),
    "weftBarrier": (_R, [_H]),
    "weftSendTagged": (_R, [_H, _SZ, _I, _I, _I, _H, _H]),
    "weftRecvTagged": (_R, [_H, _SZ, _I, _I, _I, _H, _H]),
    "weftRecvAnySource": (_R, [_H, _SZ, _I, _I, c_int_p, _H, _H]),
    # weft/kernels.h
    "weftFlattenEx": (_R, [_tensor_p, _I, _H, _I, _size_p, _F, _kcfg_p, _H]),
    "weftUnflattenEx": (_R, [_H, _I, _size_p, _tensor_p, _I, _F, _I, _kcfg_p, _H]),
    "weftUnscaleCheckFiniteEx": (_R, [_tensor_p, _I, _F, c_int_p, _kcfg_p, _H]),
    "weftL2NormEx": (_R, [_tensor_p, _I, _float_p, _float_p, _kcfg_p, _H]),
    "weftChunkCatEx": (_R, [_tensor_p, _I, _I, _size_p, _H, _I, _F, _kcfg_p, _H]),
    "weftChunkSplitEx": (_R, [_H, _I, _I, _size_p, _tensor_p, _I, _F, _I, _kcfg_p, _H]),
    # weft/reducer.h
    "weftReducerCreate": (_R, [_H, _tensor_p, _I, ctypes.POINTER(ReducerConfig), c_void_pp]),
    "weftReducerMarkReady": (_R, [_H, _I, _H, _H]),
    "weftReducerMarkUnused": (_R, [_H, _I]),
    "weftReducerFinalize": (_R, [_H, _H]),
    "weftReducerSetSync": (_R, [_H, _I]),
    "weftReducerDestroy": (_R, [_H]),
    "weftReducerGetGradSlot": (_R, [_H, _I, c_void_pp, c_int_p]),
    "weftReducerGetBucketCount": (_R, [_H, c_int_p]),
    "weftReducerGetLayoutVersion": (_R, [_H, c_int_p]),
    "weftReducerGetGradUsed": (_R, [_H, _I, c_int_p]),
    # weft/shard.h: shard groups
    "weftShardGroupCreate": (_R, [_H, _H, ctypes.POINTER(ParamDesc), _I, ctypes.POINTER(ShardGroupConfig),
                                  c_void_pp]),
    "weftShardGroupDestroy": (_R, [_H]),
    "weftShardGroupGetShard": (_R, [_H, _I, ctypes.POINTER(ShardDesc)]),
    "weftShardGroupGetBuffers": (_R, [_H, _float_pp, _float_pp, _size_p]),
    "weftShardGroupLoadFull": (_R, [_H, ctypes.POINTER(_H), _I]),
    "weftShardGroupUnshardInto": (_R, [_H, _H, _H]),
    "weftShardGroupGetFullLayout": (_R, [_H, _size_p, _size_p, _I]),
    "weftShardGroupReduceGrads": (_R, [_H, _tensor_p, _I, _H]),
    "weftShardGroupZeroGrads": (_R, [_H]),
    "weftShardGroupGatherFull": (_R, [_H, _I, ctypes.POINTER(_H), _I]),
    "weftShardGroupScatterFull": (_R, [_H, _I, ctypes.POINTER(_H), _I]),
    "weftShardGroupGetMemory": (_R, [_H, ctypes.POINTER(ShardMemory)]),
    "weftShardGroupGatherFullFrom": (_R, [_H, _H, _I, ctypes.POINTER(_H), _I]),
    "weftShardGroupScatterFullInto": (_R, [_H, _I, ctypes.POINTER(_H), _I, _H]),
    # weft/shard.h: the shard schedule
    "weftShardScheduleCreate": (_R, [_H, ctypes.POINTER(ScheduleConfig), c_void_pp]),
    "weftShardScheduleCreateCuda": (_R, [_H, ctypes.POINTER(ScheduleConfig), c_void_pp]),
    "weftShardScheduleDestroy": (_R, [_H]),
    "weftShardScheduleDeclareOrder": (_R, [_H, ctypes.POINTER(_H), _I]),
    "weftShardScheduleSetReshardAfterForward": (_R, [_H, _H, _I]),
    "weftShardScheduleBeginStep": (_R, [_H]),
    "weftShardSchedulePreForward": (_R, [_H, _H]),
    "weftShardSchedulePostForward": (_R, [_H, _H]),
    "weftShardSchedulePreBackward": (_R, [_H, _H]),
    "weftShardSchedulePostBackward": (_R, [_H, _H, _tensor_p, _I]),
    "weftShardScheduleEndStep": (_R, [_H]),
    "weftShardScheduleGetState": (_R, [_H, c_int_p, c_int_p, c_int_p]),
}
for _name, (_restype, _args) in SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _args


def check(code):
    """Raises WeftError for anything but weftSuccess."""
    if code != SUCCESS:
        raise WeftError(code, lib.weftGetLastError().decode("utf-8", "replace"))


def call(name, *args):
    """Calls weft function `name` (declared in SIGNATURES) with checked integer arguments; raises WeftError."""
    if name not in SIGNATURES:
        raise AttributeError("weft: %s is not declared in weft._lib.SIGNATURES" % name)
    fn = getattr(lib, name)
    types = fn.argtypes
    args = [checked_int(a, t, "%s argument %d" % (name, i + 1)) for i, (a, t) in enumerate(zip(args, types))] + \
        list(args[len(types):])
    check(fn(*args))

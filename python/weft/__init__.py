"""weft: the communication runtime under data-parallel and sharded training.

A ctypes binding of libweft (no compiled extension):

    import weft
    comm = weft.init()                       # the world communicator
    comm.all_reduce(x, op="avg")             # torch tensors or numpy arrays
    model = weft.torch.DistributedDataParallel(model)   # PyTorch adapter
    weft.kernels.flatten(grads, bucket)      # fused multi-tensor kernels on host memory

weft.torch is imported lazily, so this package works without PyTorch.
"""

import ctypes

from . import kernels
from ._lib import WeftError
from .comm import Communicator, init, init_in_process, launched_world_size

Comm = Communicator  # the short name torch users reach for
from .reducer import Reducer
from .shard import ShardGroup, ShardSchedule
from .stream import Stream

try:
    from ._version import VERSION as __version__  # an installed weft: written by its build
except ImportError:  # a checkout's package: the version of the libweft it loaded, stamped by the same build
    __version__ = None

__all__ = ["Comm", "Communicator", "kernels", "Reducer", "ShardGroup", "ShardSchedule", "Stream", "WeftError", "init",
           "init_in_process", "library_version"]


def library_version():
    """WEFT_VERSION_CODE of the loaded libweft (major * 10000 + minor * 100 + patch)."""
    from . import _lib
    v = ctypes.c_int()
    _lib.call("weftGetVersion", ctypes.byref(v))
    return v.value


def __getattr__(name):
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'weft' has no attribute %r" % name)


if __version__ is None:
    _code = library_version()
    __version__ = "%d.%d.%d" % (_code // 10000, _code // 100 % 100, _code % 100)

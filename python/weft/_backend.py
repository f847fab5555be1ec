"""weft as a torch.distributed backend: ``dist.init_process_group("weft")``.

    import torch.distributed as dist
    import weft.torch                       # registers "weft" (an installed weft: import torch does)
    dist.init_process_group("weft")         # under torchrun; CPU and CUDA tensors
    dist.all_reduce(t)                      # host comm for CPU tensors, NCCL for CUDA ones

The backend itself is weft._c10d, a C++ extension (python/c10d/) over
libweft's C ABI, built by meson against this interpreter's torch. It is
looked for as libweft.so is (weft/_lib.py): $WEFT_C10D_MODULE, next to this
package (an install), beside the loaded libweft.so in its build directory,
then the checkout's build*/ directories.
"""

import glob
import importlib.machinery
import importlib.util
import os
import sys
import warnings

import torch
import torch.distributed as dist

NAME = "weft"
_ext = None


def _candidates():
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [here]
    from . import _lib
    lib_path = getattr(_lib.lib, "_name", None)
    if lib_path:
        dirs.append(os.path.join(os.path.dirname(os.path.abspath(lib_path)), "python", "c10d"))
    root = os.path.dirname(os.path.dirname(here))
    dirs.append(os.path.join(root, "build", "python", "c10d"))
    dirs += sorted(glob.glob(os.path.join(root, "build*", "python", "c10d")))
    for d in dirs:
        for suffix in suffixes:
            yield os.path.join(d, "_c10d" + suffix)


def _load():
    """The weft._c10d module (loaded once), after libweft itself so both use one library."""
    global _ext
    if _ext is not None:
        return _ext
    from . import _lib  # noqa: F401  loads libweft.so: the extension's DT_NEEDED then resolves to it
    path = os.environ.get("WEFT_C10D_MODULE")
    if path and not os.path.exists(path):
        raise ImportError("weft: WEFT_C10D_MODULE=%s does not exist" % path)
    tried = []
    if not path:
        for candidate in _candidates():
            if os.path.exists(candidate):
                path = candidate
                break
            tried.append(candidate)
    if not path:
        raise ImportError("weft: the torch backend weft._c10d is not built (meson builds it when .venv/ has torch: "
                          "tools/setup); tried %s" % ", ".join(tried))
    spec = importlib.util.spec_from_file_location("weft._c10d", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    running = _running_minor()
    if module.torch_version() != running:
        raise ImportError("weft: %s was built against torch %s but this is torch %s: rebuild it (a c10d backend "
                          "fits one torch minor)" % (path, module.torch_version(), running))
    sys.modules["weft._c10d"] = module
    _ext = module
    return module


def _create(store, group_rank, group_size, timeout):
    """torch's backend creator: one weft backend per process group (its own store prefix)."""
    ms = int(timeout.total_seconds() * 1000)
    return _load().create(store, group_rank, group_size, max(ms, 1))


def _running_minor():
    return ".".join(str(torch.__version__).split("+")[0].split(".")[:2])


def check_torch():
    """ImportError naming both versions when this weft was built for another torch minor than the one running.

    An installed weft records its build's torch in _c10d_torch.py, so the check needs no load of weft._c10d
    (which would fail to link under another torch with a trace that names neither version); a checkout's
    module is checked when _load() loads it.
    """
    try:
        from ._c10d_torch import TORCH as built
    except ImportError:
        return
    running = _running_minor()
    if built != running:
        from ._version import VERSION
        raise ImportError("weft %s was built for torch %s, but this is torch %s: install the weft built for torch %s "
                          "(pip install . in this environment rebuilds it), or torch %s.*"
                          % (VERSION, built, torch.__version__, running, built))


def register():
    """Registers "weft" for cpu and cuda tensors with torch.distributed (once; later calls do nothing).

    Raises ImportError when weft was built for another torch minor (check_torch)."""
    check_torch()
    if not dist.is_available():
        return
    if NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])


def autoload():
    """The "torch.backends" entry point, which `import torch` calls: register(), but a weft built for another
    torch is a warning naming both versions rather than an error, which would fail `import torch` itself."""
    try:
        register()
    except ImportError as e:
        warnings.warn(str(e), RuntimeWarning, stacklevel=2)

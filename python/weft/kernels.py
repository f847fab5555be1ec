"""The fused multi-tensor kernels (weft/kernels.h) over host memory: numpy
arrays and CPU torch tensors, contiguous, of float32, float16, bfloat16
(torch only) or float64.

    weft.kernels.flatten([a, b], bucket, scale=1 / world)   # bucket[...] = scale * (a, b), cast once
    weft.kernels.unflatten(bucket, [a, b])                  # the copy back
    found_inf = weft.kernels.unscale_check_finite(grads, 1 / loss_scale)
    total, norms = weft.kernels.l2_norm(grads)

Every conversion rounds once, to nearest even, as torch's .to(dtype) does.
Sources and destinations must not overlap. `stream` is None (the call
returns when done) or a weft.Stream for the copy kernels (enqueued: the
stream keeps the tensors alive until it is synchronised); unscale and norm
return their results, so they always block. Buffer sizes are checked here
before the call, since the C functions take bare destination pointers.
Every tensor is checked to be host memory here, so the calls state it
(weftFlattenEx & co.) and the library classifies no pointer, also in a
process where CUDA is loaded.
"""

import ctypes

from . import _lib
from ._tensors import describe, keep_alive, stream_handle

__all__ = ["flatten", "unflatten", "unscale_check_finite", "l2_norm", "chunk_cat", "chunk_split"]

_HOST = _lib.KernelConfig(memory=0)  # weftMemoryHost: describe() checked every tensor


def _tensors(xs, what):
    """A weftTensor_t array for xs (and the element counts)."""
    xs = list(xs)
    arr = (_lib.Tensor * max(len(xs), 1))()
    counts = []
    for i, x in enumerate(xs):
        p, n, t = describe(x, "%s[%d]" % (what, i), "host")
        arr[i] = _lib.Tensor(p, n, t)
        counts.append(n)
    return arr, counts, len(xs)


def _sizes(values, n, what):
    """A size_t array of n entries, or None."""
    if values is None:
        return None
    values = [int(v) for v in values]
    if len(values) != n:
        raise ValueError("weft: %s has %d entries for %d tensors" % (what, len(values), n))
    if any(v < 0 for v in values):
        raise ValueError("weft: %s = %s holds a negative entry" % (what, values))
    return (ctypes.c_size_t * max(n, 1))(*values)


def _extent(counts, offsets):
    """Elements a flat buffer needs for tensors of `counts` at `offsets` (None: back to back)."""
    if offsets is None:
        return sum(counts)
    return max((o + c for o, c in zip(offsets, counts)), default=0)


def _chunks(counts, world, chunk_counts):
    world = _lib.checked_int(world, ctypes.c_int, "world")
    if world < 1:
        raise ValueError("weft: world = %d must be at least 1" % world)
    if chunk_counts is None:
        return [-(-c // world) for c in counts]
    return [int(c) for c in chunk_counts]


def _flat(x, what, need):
    p, n, t = describe(x, what, "host")
    if n < need:
        raise ValueError("weft: %s has %d elements, but the call needs %d" % (what, n, need))
    return p, t


def flatten(srcs, dst, offsets=None, scale=1.0, stream=None):
    """dst[offsets[i] + j] = scale * srcs[i][j], in dst's dtype; offsets None packs back to back."""
    arr, counts, n = _tensors(srcs, "srcs")
    offs = _sizes(offsets, n, "offsets")
    p, t = _flat(dst, "dst", _extent(counts, None if offs is None else list(offs)[:n]))
    _lib.call("weftFlattenEx", arr, n, p, t, offs, scale, ctypes.byref(_HOST), stream_handle(stream, "host"))
    keep_alive(stream, dst, *srcs)


def unflatten(src, dsts, offsets=None, scale=1.0, accumulate=False, stream=None):
    """dsts[i][j] = scale * src[offsets[i] + j] (added to the old value when accumulate), in dsts[i]'s dtype."""
    arr, counts, n = _tensors(dsts, "dsts")
    offs = _sizes(offsets, n, "offsets")
    p, t = _flat(src, "src", _extent(counts, None if offs is None else list(offs)[:n]))
    _lib.call("weftUnflattenEx", p, t, offs, arr, n, scale, int(bool(accumulate)), ctypes.byref(_HOST),
              stream_handle(stream, "host"))
    keep_alive(stream, src, *dsts)


def unscale_check_finite(tensors, inv_scale):
    """Multiplies every element by inv_scale in place; True if any result is inf or NaN (GradScaler's found_inf)."""
    arr, _, n = _tensors(tensors, "tensors")
    found = ctypes.c_int(0)
    _lib.call("weftUnscaleCheckFiniteEx", arr, n, inv_scale, ctypes.byref(found), ctypes.byref(_HOST), None)
    return bool(found.value)


def l2_norm(tensors):
    """(total, norms): the L2 norm of all tensors together and of each, accumulated in float64."""
    arr, _, n = _tensors(tensors, "tensors")
    norms = (ctypes.c_float * max(n, 1))()
    total = ctypes.c_float()
    _lib.call("weftL2NormEx", arr, n, norms, ctypes.byref(total), ctypes.byref(_HOST), None)
    return total.value, list(norms)[:n]


def chunk_cat(srcs, world, dst, chunk_counts=None, scale=1.0, stream=None):
    """FSDP2's chunk_cat: rank r's slab of dst holds chunk r of every source (chunk_counts[i] elements,
    by default ceil(count / world)), zero-padded; dst holds world * sum(chunks) elements."""
    arr, counts, n = _tensors(srcs, "srcs")
    chunks = _chunks(counts, world, chunk_counts)
    cc = _sizes(chunk_counts, n, "chunk_counts")
    p, t = _flat(dst, "dst", world * sum(chunks))
    _lib.call("weftChunkCatEx", arr, n, world, cc, p, t, scale, ctypes.byref(_HOST), stream_handle(stream, "host"))
    keep_alive(stream, dst, *srcs)


def chunk_split(src, world, dsts, chunk_counts=None, scale=1.0, accumulate=False, stream=None):
    """The inverse of chunk_cat: dsts[i]'s chunk r from rank r's slab of src (added when accumulate)."""
    arr, counts, n = _tensors(dsts, "dsts")
    chunks = _chunks(counts, world, chunk_counts)
    cc = _sizes(chunk_counts, n, "chunk_counts")
    p, t = _flat(src, "src", world * sum(chunks))
    _lib.call("weftChunkSplitEx", p, t, world, cc, arr, n, scale, int(bool(accumulate)), ctypes.byref(_HOST),
              stream_handle(stream, "host"))
    keep_alive(stream, src, *dsts)

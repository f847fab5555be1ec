#!/usr/bin/env python3
"""Cross-checks weft's kernels against PyTorch through the C ABI (ctypes).

float32 -> bfloat16 / float16 with scaling must equal torch's
(x * scale).to(dtype) bit for bit (NaN only needs to stay NaN); unflatten
with accumulation must equal dst + src.float() * scale computed by torch in
float32; the L2 norm must be within float32 rounding of torch's float64 norm.
Usage: kernels_torch_check.py path/to/libweft.so  (exit 77: skipped, no torch)
"""
import ctypes
import sys

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable by", sys.executable)
    sys.exit(77)

FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2
TORCH = {FLOAT32: torch.float32, FLOAT16: torch.float16, BFLOAT16: torch.bfloat16}


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("count", ctypes.c_size_t), ("dtype", ctypes.c_int)]


def salted(n, gen):
    """Random values over many magnitudes, with inf, NaN, subnormals, -0.0 and float16 overflow."""
    x = torch.randn(n, generator=gen) * torch.pow(2.0, torch.randint(-30, 30, (n,), generator=gen).float())
    specials = torch.tensor([float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40, 6e-6, 70000.0, -0.0,
                             65519.0, 65520.0, 1.00390625, 1.01171875])
    idx = torch.randint(0, n, (n // 8,), generator=gen)
    x[idx] = specials[torch.randint(0, len(specials), (n // 8,), generator=gen)]
    return x


def same_bits(a, b):
    """Bitwise equal, except that any NaN equals any NaN."""
    bits = {2: torch.int16, 4: torch.int32}[a.element_size()]
    nan = torch.isnan(a.float()) & torch.isnan(b.float())
    return bool(((a.view(bits) == b.view(bits)) | nan).all())


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.weftGetLastError.restype = ctypes.c_char_p
    gen = torch.Generator().manual_seed(5)
    failures = 0

    def check(ok, what):
        nonlocal failures
        print(("ok   " if ok else "FAIL ") + what)
        failures += 0 if ok else 1

    def call(rc):
        if rc != 0:
            raise RuntimeError(lib.weftGetLastError().decode())

    sizes = [1, 3, 4099, 65537, 100]
    srcs = [salted(n, gen) for n in sizes]
    arr = (Tensor * len(srcs))(*[Tensor(t.data_ptr(), t.numel(), FLOAT32) for t in srcs])
    for dst_t in (BFLOAT16, FLOAT16):
        for scale in (1.0, 0.125, 1.0 / 3.0):
            out = torch.empty(sum(sizes), dtype=TORCH[dst_t])
            call(lib.weftFlatten(arr, len(srcs), ctypes.c_void_p(out.data_ptr()), dst_t, None,
                                 ctypes.c_float(scale), None))
            want = torch.cat([(t * torch.tensor(scale, dtype=torch.float32)).to(TORCH[dst_t]) for t in srcs])
            check(same_bits(out, want), f"flatten float32 -> {TORCH[dst_t]} scale {scale:.4g}")

    for src_t in (BFLOAT16, FLOAT16):
        flat = salted(sum(sizes), gen).to(TORCH[src_t])
        dsts = [salted(n, gen) for n in sizes]
        want = [d.clone() for d in dsts]
        darr = (Tensor * len(dsts))(*[Tensor(t.data_ptr(), t.numel(), FLOAT32) for t in dsts])
        call(lib.weftUnflatten(ctypes.c_void_p(flat.data_ptr()), src_t, None, darr, len(dsts), ctypes.c_float(0.5),
                               1, None))
        pos = 0
        for w, n in zip(want, sizes):
            w += flat[pos:pos + n].float() * torch.tensor(0.5, dtype=torch.float32)
            pos += n
        check(all(same_bits(d, w) for d, w in zip(dsts, want)), f"unflatten-accumulate {TORCH[src_t]} -> float32")

    finite = [torch.nan_to_num(t, nan=1.0, posinf=2.0, neginf=-2.0) for t in srcs]
    farr = (Tensor * len(finite))(*[Tensor(t.data_ptr(), t.numel(), FLOAT32) for t in finite])
    norms = (ctypes.c_float * len(finite))()
    total = ctypes.c_float()
    call(lib.weftL2Norm(farr, len(finite), norms, ctypes.byref(total), None))
    want_total = torch.linalg.vector_norm(torch.cat(finite).double()).item()
    check(abs(total.value - want_total) <= 1e-6 * want_total, f"l2 norm {total.value:.9g} vs torch {want_total:.9g}")
    check(all(abs(norms[i] - torch.linalg.vector_norm(t.double()).item()) <=
              1e-6 * torch.linalg.vector_norm(t.double()).item() for i, t in enumerate(finite)), "per-tensor norms")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

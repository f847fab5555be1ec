// The per-instruction-set pieces of the host kernels, chosen once per process
// from what the CPU reports (cpuid through __builtin_cpu_supports):
// AVX-512 (F, BW, VL), then AVX2 with F16C and FMA, then portable C++.
//
// Each piece handles one contiguous run and must give the reference's bits
// for every input (kernels/reference/convert.h), whatever the alignment of
// its pointers and the length of the run.
#ifndef WEFT_KERNELS_CPU_ISA_H_
#define WEFT_KERNELS_CPU_ISA_H_

#include <cstddef>

#include "kernels/types.h"

namespace weft {
namespace kernels {
namespace cpu {

// One run with the type pair, accumulation and streaming fixed when it was
// picked: dst[k] = convert(dst_t, scale * src[k]) (+ old dst[k]) for k < n.
using RunFn = void (*)(const void* src, void* dst, size_t n, float scale);

struct Isa {
  const char* name;
  // dst[k] = convert(dst_t, scale * src[k]) (+ old dst[k]) for k < n; src == nullptr writes zeros.
  // `stream`: a hint that dst will not be read soon (larger than the caches):
  // use non-temporal stores where that helps. Results are the same either way.
  void (*convert)(const void* src, DataType src_t, void* dst, DataType dst_t, size_t n, float scale,
                  bool accumulate, bool stream);
  // x[k] = convert(t, x[k] * inv_scale); returns true if any result is inf or NaN.
  bool (*unscale)(void* x, DataType t, size_t n, float inv_scale);
  // The block sum of squares of kernels/types.h for n <= kNormBlock elements.
  double (*block_sum_of_squares)(const void* x, DataType t, size_t n);
  // convert's vector loop for one float32/float16/bfloat16 pair, resolved
  // once so that a loop over 10,000 tiny segments of that pair skips the
  // per-call dispatch. nullptr when float64 is involved, and always in the
  // portable set: use convert then. Ask only for copies that are not bit
  // copies (reference::IsBitCopy): those are memcpy.
  RunFn (*pick)(DataType src_t, DataType dst_t, bool accumulate, bool stream);
  // Bit copies of n whole segments of `size`-byte elements (same type on both
  // sides, scale 1): dst = src, or zeros where src is nullptr. The loop a
  // bucket fill of many small float32 tensors spends its time in.
  void (*copy_bits)(const Segment* segments, size_t n, size_t size);
};

const Isa& PortableIsa();
const Isa* Avx2Isa();    // nullptr when not compiled in
const Isa* Avx512Isa();  // nullptr when not compiled in
// The best one this CPU supports; the others stay callable (tests compare them all).
const Isa& BestIsa();
// F16C from CPUID: clang 14's __builtin_cpu_supports does not know "f16c".
bool CpuHasF16c();

}  // namespace cpu
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CPU_ISA_H_

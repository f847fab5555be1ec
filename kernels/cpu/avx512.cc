// The AVX-512 host kernels: 16 floats per vector, the same operations as
// avx2.cc (see there for why bfloat16 is rounded with integer arithmetic).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/reference/convert.h"

#if defined(__x86_64__)
#include <immintrin.h>

// clang has no GCC target pragma (and builds the fuzz targets): its own
// attribute pragma gives every function below the same target.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,f16c,fma")
#endif
// GCC 12's _mm512_cvtph_ps / _mm512_cvtps_ph pass an _mm*_undefined_*()
// operand that -Wmaybe-uninitialized reports (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace weft {
namespace kernels {
namespace cpu {
namespace avx512 {

struct V {
  static constexpr size_t kWidth = 16;
  using F = __m512;

  static F Splat(float s) { return _mm512_set1_ps(s); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Add(F a, F b) { return _mm512_add_ps(a, b); }

  template <DataType T>
  static F Load(const char* p) {
    if constexpr (T == DataType::kFloat32) {
      return _mm512_loadu_ps(p);
    } else if constexpr (T == DataType::kFloat16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
  }

  template <DataType T>
  static __m256i Narrow(F x) {
    if constexpr (T == DataType::kFloat16) {
      return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    } else {
      const __m512i u = _mm512_castps_si512(x);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
      const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
      const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
      const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
    }
  }

  template <DataType T>
  static void Store(char* p, F x) {
    if constexpr (T == DataType::kFloat32) {
      _mm512_storeu_ps(p, x);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Narrow<T>(x));
    }
  }
  template <DataType T>
  static void StoreStream(char* p, F x) {
    if constexpr (T == DataType::kFloat32) {
      _mm512_stream_ps(reinterpret_cast<float*>(p), x);
    } else {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p), Narrow<T>(x));
    }
  }

  static F NonFiniteMask(F x, F acc) {
    const __m512i e = _mm512_set1_epi32(0x7f800000);
    const __mmask16 m = _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), e), e);
    return _mm512_mask_mov_ps(acc, m, _mm512_castsi512_ps(_mm512_set1_epi32(-1)));
  }
  static bool Any(F mask) {
    const __m512i m = _mm512_castps_si512(mask);
    return _mm512_test_epi32_mask(m, m) != 0;
  }

  static void SetSquares(F x, double* lane) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    _mm512_store_pd(lane, _mm512_mul_pd(lo, lo));
    _mm512_store_pd(lane + 8, _mm512_mul_pd(hi, hi));
  }
  static void AddSquares(F x, double* lane) {
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    _mm512_store_pd(lane, _mm512_fmadd_pd(lo, lo, _mm512_load_pd(lane)));
    _mm512_store_pd(lane + 8, _mm512_fmadd_pd(hi, hi, _mm512_load_pd(lane + 8)));
  }
};

#include "kernels/cpu/simd_body.inc"

}  // namespace avx512

const Isa* Avx512Isa() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !CpuHasF16c() || !__builtin_cpu_supports("fma")) {
    return nullptr;
  }
  static const Isa isa{"avx512", avx512::Convert, avx512::Unscale, avx512::BlockSumOfSquares, avx512::Pick,
                              avx512::CopyBits};
  return &isa;
}

}  // namespace cpu
}  // namespace kernels
}  // namespace weft

#pragma GCC diagnostic pop
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64

namespace weft {
namespace kernels {
namespace cpu {
const Isa* Avx512Isa() { return nullptr; }
}  // namespace cpu
}  // namespace kernels
}  // namespace weft

#endif

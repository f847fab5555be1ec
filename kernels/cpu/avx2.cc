// The AVX2 + F16C + FMA host kernels: 8 floats per vector. float16 goes
// through F16C's vcvtph2ps / vcvtps2ph (round to nearest even, subnormals
// kept); bfloat16 is rounded with integer arithmetic, because no AVX2
// instruction does it (and AVX-512 BF16's vcvtneps2bf16 flushes subnormals).
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
#pragma clang attribute push(__attribute__((target("avx2,f16c,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c,fma")
#endif

namespace weft {
namespace kernels {
namespace cpu {
namespace avx2 {

struct V {
  static constexpr size_t kWidth = 8;
  using F = __m256;

  static F Splat(float s) { return _mm256_set1_ps(s); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Add(F a, F b) { return _mm256_add_ps(a, b); }

  template <DataType T>
  static F Load(const char* p) {
    if constexpr (T == DataType::kFloat32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == DataType::kFloat16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
  }

  // float16 or bfloat16 bits of x's lanes, rounded to nearest even.
  template <DataType T>
  static __m128i Narrow(F x) {
    if constexpr (T == DataType::kFloat16) {
      return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    } else {
      // core/dtype.h FloatToBf16: u + 0x7fff + lsb, NaN quieted with its sign.
      const __m256i u = _mm256_castps_si256(x);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
      const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
      const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
      // Every lane holds at most 0xffff: the unsigned-saturating pack keeps it.
      return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8));
    }
  }

  template <DataType T>
  static void Store(char* p, F x) {
    if constexpr (T == DataType::kFloat32) {
      _mm256_storeu_ps(reinterpret_cast<float*>(p), x);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Narrow<T>(x));
    }
  }
  template <DataType T>
  static void StoreStream(char* p, F x) {
    if constexpr (T == DataType::kFloat32) {
      _mm256_stream_ps(reinterpret_cast<float*>(p), x);
    } else {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p), Narrow<T>(x));
    }
  }

  // Lanes whose exponent is all ones (inf, NaN), or-ed into `acc`.
  static F NonFiniteMask(F x, F acc) {
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(x), e), e);
    return _mm256_or_ps(acc, _mm256_castsi256_ps(m));
  }
  static bool Any(F mask) { return _mm256_movemask_ps(mask) != 0; }

  // lane[0..7] = double(x)^2, exactly (the square of a float is exact in double).
  static void SetSquares(F x, double* lane) {
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    _mm256_store_pd(lane, _mm256_mul_pd(lo, lo));
    _mm256_store_pd(lane + 4, _mm256_mul_pd(hi, hi));
  }
  // lane[0..7] += double(x)^2, exactly.
  static void AddSquares(F x, double* lane) {
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    _mm256_store_pd(lane, _mm256_fmadd_pd(lo, lo, _mm256_load_pd(lane)));
    _mm256_store_pd(lane + 4, _mm256_fmadd_pd(hi, hi, _mm256_load_pd(lane + 4)));
  }
};

#include "kernels/cpu/simd_body.inc"

}  // namespace avx2

const Isa* Avx2Isa() {
  if (!__builtin_cpu_supports("avx2") || !CpuHasF16c() || !__builtin_cpu_supports("fma")) {
    return nullptr;
  }
  static const Isa isa{"avx2", avx2::Convert, avx2::Unscale, avx2::BlockSumOfSquares, avx2::Pick,
                              avx2::CopyBits};
  return &isa;
}

}  // namespace cpu
}  // namespace kernels
}  // namespace weft

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64

namespace weft {
namespace kernels {
namespace cpu {
const Isa* Avx2Isa() { return nullptr; }
}  // namespace cpu
}  // namespace kernels
}  // namespace weft

#endif

// Inputs and comparisons for the kernel tests: random values salted with the
// cases that break conversions (inf, NaN, subnormals, values that overflow
// float16, -0.0), poisoned outputs, and bit-for-bit comparison.
#ifndef WEFT_TESTS_UNIT_KERNELS_TEST_UTIL_H_
#define WEFT_TESTS_UNIT_KERNELS_TEST_UTIL_H_

#include <cstddef>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {
namespace testing {

inline constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16,
                                           DataType::kFloat64};

// A byte buffer holding `count` elements of `t` starting `misalign` elements
// past a 64-byte boundary.
class Buffer {
 public:
  Buffer(DataType t, size_t count, size_t misalign = 0)
      : t_(t), count_(count), misalign_(misalign), bytes_((count + misalign) * ElementSize(t) + 64) {}
  // A copy holds the same elements at the same misalignment (the raw bytes
  // alone would not do: the copy's 64-byte boundary falls elsewhere).
  Buffer(const Buffer& o) : Buffer(o.t_, o.count_, o.misalign_) { std::memcpy(data(), o.data(), o.bytes()); }
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&&) = default;
  void* data() { return Base() + misalign_ * ElementSize(t_); }
  const void* data() const { return const_cast<Buffer*>(this)->data(); }
  size_t count() const { return count_; }
  DataType dtype() const { return t_; }
  size_t bytes() const { return count_ * ElementSize(t_); }
  TensorRef ref() { return {data(), count_, t_}; }
  // 0xA5 in every byte: finite values no kernel here writes by chance, so an
  // element left unwritten (or written where it should not be) shows.
  void Poison() { std::memset(Base(), 0xA5, bytes_.size() - static_cast<size_t>(Base() - bytes_.data())); }

 private:
  unsigned char* Base() {
    uintptr_t p = reinterpret_cast<uintptr_t>(bytes_.data());
    return bytes_.data() + ((64 - p % 64) % 64);
  }
  DataType t_;
  size_t count_, misalign_;
  std::vector<unsigned char> bytes_;
};

// Random finite values of varied magnitude, with about 1 in 16 elements a
// special value: +-inf, NaN, float32 and float16 subnormals, values beyond
// float16's range, +-0.0, values exactly halfway between bfloat16 neighbours.
inline void FillRandom(Buffer& b, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> mant(-2.0, 2.0);
  std::uniform_int_distribution<int> expo(-30, 30);
  std::uniform_int_distribution<int> pick(0, 15 + 12);
  for (size_t i = 0; i < b.count(); ++i) {
    double v = std::ldexp(mant(rng), expo(rng));
    switch (pick(rng) - 16) {
      case 0: v = INFINITY; break;
      case 1: v = -INFINITY; break;
      case 2: v = NAN; break;
      case 3: v = -NAN; break;
      case 4: v = 0x1p-140 * mant(rng); break;      // float32 subnormal
      case 5: v = 0x1p-20 * mant(rng); break;       // float16 subnormal
      case 6: v = 70000.0 * (1 + mant(rng)); break;  // overflows float16
      case 7: v = -0.0; break;
      case 8: v = 0.0; break;
      case 9: v = BitsFloat(0x3f808000u); break;    // bfloat16 tie, rounds to even (down)
      case 10: v = BitsFloat(0x3f818000u); break;   // bfloat16 tie, rounds up
      case 11: v = 65519.0; break;                  // just under float16's rounding to inf
      default: break;
    }
    switch (b.dtype()) {
      case DataType::kFloat32: static_cast<float*>(b.data())[i] = static_cast<float>(v); break;
      case DataType::kFloat64: static_cast<double*>(b.data())[i] = v; break;
      case DataType::kFloat16: static_cast<uint16_t*>(b.data())[i] = FloatToHalf(static_cast<float>(v)); break;
      case DataType::kBfloat16: static_cast<uint16_t*>(b.data())[i] = FloatToBf16(static_cast<float>(v)); break;
      default: break;
    }
  }
}

inline bool IsNaN(const Buffer& b, size_t i) {
  const char* p = static_cast<const char*>(b.data());
  switch (b.dtype()) {
    case DataType::kFloat32: { float v; std::memcpy(&v, p + 4 * i, 4); return std::isnan(v); }
    case DataType::kFloat64: { double v; std::memcpy(&v, p + 8 * i, 8); return std::isnan(v); }
    case DataType::kFloat16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return (v & 0x7fff) > 0x7c00; }
    case DataType::kBfloat16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return (v & 0x7fff) > 0x7f80; }
    default: return false;
  }
}

// Index of the first element whose bits differ, or -1. Any two NaNs are
// equal: which NaN an operation on NaNs returns (sign, payload) depends on
// the operand order the compiler picked, so the kernels leave it unspecified.
inline long FirstDifference(const Buffer& a, const Buffer& b) {
  const size_t size = ElementSize(a.dtype());
  for (size_t i = 0; i < a.count(); ++i) {
    if (IsNaN(a, i) && IsNaN(b, i)) continue;
    if (std::memcmp(static_cast<const char*>(a.data()) + i * size, static_cast<const char*>(b.data()) + i * size,
                    size) != 0) {
      return static_cast<long>(i);
    }
  }
  return -1;
}

inline std::string Hex(const Buffer& b, size_t i) {
  const size_t size = ElementSize(b.dtype());
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const char*>(b.data()) + i * size, size);
  char s[32];
  std::snprintf(s, sizeof(s), "0x%0*llx", static_cast<int>(2 * size), static_cast<unsigned long long>(v));
  return s;
}

// Sizes and scales every copy test sweeps.
inline constexpr size_t kOddSizes[] = {0, 1, 3, 4099, 65537};
inline constexpr float kScales[] = {1.0f, 0.125f, 1.0f / 3.0f, 1024.0f};

// Tensors of the given sizes, cycling through dtypes when `mixed`, each
// starting i % 7 elements past an aligned address.
inline std::vector<Buffer> MakeTensors(const std::vector<size_t>& sizes, DataType t, bool mixed,
                                       std::mt19937_64& rng) {
  std::vector<Buffer> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back(mixed ? kFloatTypes[i % 4] : t, sizes[i], i % 7);
    FillRandom(out.back(), rng);
  }
  return out;
}

inline std::vector<TensorRef> Refs(std::vector<Buffer>& bufs) {
  std::vector<TensorRef> r;
  for (Buffer& b : bufs) r.push_back(b.ref());
  return r;
}

inline size_t Total(const std::vector<size_t>& sizes) {
  size_t n = 0;
  for (size_t s : sizes) n += s;
  return n;
}

// n tensors of 0..300 elements placed in a flat buffer of `end` elements with
// gaps of 0..5 elements before each (offsets[i] is where tensor i starts).
struct GappedCase {
  std::vector<size_t> sizes, offsets;
  size_t end = 0;
};

inline GappedCase MakeGappedCase(int n, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> size(0, 300), gap(0, 5);
  GappedCase c;
  for (int i = 0; i < n; ++i) {
    c.sizes.push_back(size(rng));
    c.end += gap(rng);
    c.offsets.push_back(c.end);
    c.end += c.sizes.back();
  }
  return c;
}

// A chunk-cat layout to test: 37 tensors of 0..2000 elements (one of 65537),
// chunked for `world` ranks as FSDP2 does (ceil(count / world)) or, when
// `explicit_chunks`, with chunk_counts up to 2 larger than needed; `slab` is
// the sum of the chunks.
struct ChunkCase {
  std::vector<size_t> sizes, chunks;
  size_t slab = 0;
};

inline ChunkCase MakeChunkCase(int world, bool explicit_chunks, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> size(0, 2000);
  ChunkCase c;
  c.sizes.resize(37);
  for (size_t& s : c.sizes) s = size(rng);
  c.sizes[5] = 65537;
  c.chunks.resize(c.sizes.size());
  const size_t w = static_cast<size_t>(world);
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    c.chunks[i] = (c.sizes[i] + w - 1) / w + (explicit_chunks ? i % 3 : 0);
    c.slab += c.chunks[i];
  }
  return c;
}

inline void ExpectSame(const Buffer& got, const Buffer& want, const std::string& what) {
  const long i = FirstDifference(got, want);
  EXPECT_EQ(i, -1) << what << ": element " << i << " is " << Hex(got, i) << ", reference " << Hex(want, i);
}

}  // namespace testing
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_TESTS_UNIT_KERNELS_TEST_UTIL_H_

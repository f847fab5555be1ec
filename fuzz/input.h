// What the fuzz targets share: turning libFuzzer's bytes into the arguments
// a careless caller might pass, and failing loudly when weft accepts what it
// must refuse. A size is either "real" (small, and backed by memory the
// target allocated to exactly that size, so AddressSanitizer sees any access
// past it) or "huge" (past core/limits.h's kMaxBufferBytes in elements of any
// type, so weft must refuse it without touching memory).
//
//   Input in(data, size);
//   bool huge = false;
//   size_t count = in.Count(&huge);        // real (<= kMaxRealCount) or huge
//   SetEnum(&tensor.dtype, in.EnumInt());   // any int, without UB in the target
#ifndef WEFT_FUZZ_INPUT_H_
#define WEFT_FUZZ_INPUT_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "weft/weft.h"

namespace weft_fuzz {

inline constexpr size_t kMaxRealCount = 256;
// More elements than kMaxBufferBytes (2^56) bytes hold at any element size.
inline constexpr size_t kHugeCount = (size_t{1} << 56) + 1;

class Input : public FuzzedDataProvider {
 public:
  using FuzzedDataProvider::FuzzedDataProvider;
  // A count or offset: real seven times in eight, huge otherwise.
  size_t Count(bool* huge) {
    if (ConsumeIntegralInRange<int>(0, 7) == 0) {
      *huge = true;
      return ConsumeIntegralInRange<size_t>(kHugeCount, SIZE_MAX);
    }
    return ConsumeIntegralInRange<size_t>(0, kMaxRealCount);
  }
  // An enum argument: mostly a valid value, sometimes any int.
  int EnumInt(int valid_end) {
    if (ConsumeBool()) return ConsumeIntegralInRange<int>(0, valid_end - 1);
    return ConsumeIntegral<int>();
  }
  float Scale() {
    static constexpr float kScales[] = {1.0f, 0.5f, -2.0f, 1.0f / 3.0f, 65504.0f, 1e-8f, 0.0f};
    return kScales[ConsumeIntegralInRange<size_t>(0, sizeof(kScales) / sizeof(kScales[0]) - 1)];
  }
};

// Stores an int into an enum-typed field or argument as its bytes: a C
// caller can pass any int, and converting an out-of-range int to the enum
// type in C++ would be undefined behaviour in the target rather than weft.
template <typename E>
void SetEnum(E* e, int v) {
  static_assert(sizeof(E) == sizeof(int), "weft's enums are int-sized");
  std::memcpy(e, &v, sizeof v);
}

inline size_t ElementBytes(int dtype) {
  switch (dtype) {
    case weftFloat32: case weftInt32: return 4;
    case weftFloat16: case weftBfloat16: case weftInt16: return 2;
    case weftFloat64: case weftInt64: return 8;
    case weftInt8: case weftUint8: return 1;
    default: return 8;  // an invalid type: room for any element, since weft must refuse it first
  }
}

// Finite values of any float type from the fuzzer's bytes: the top exponent
// bit cleared, so no inf or NaN (whose payload weft does not promise), and
// |x| < 2, so sums of a few stay finite.
inline void FillFinite(Input& in, void* p, size_t count, int dtype) {
  const size_t eb = ElementBytes(dtype);
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < count; ++i) {
    for (size_t k = 0; k < eb; ++k) b[i * eb + k] = in.ConsumeIntegral<unsigned char>();
    if (dtype == weftFloat32) b[i * eb + 3] &= 0xbf;
    if (dtype == weftFloat16 || dtype == weftBfloat16) b[i * eb + 1] &= 0xbf;
    if (dtype == weftFloat64) b[i * eb + 7] &= 0xbf;
  }
}

// An allocation of exactly `bytes` (at least one, so the pointer is never
// NULL by accident), freed with the object: AddressSanitizer then reports
// the first byte weft touches past it.
class Buffer {
 public:
  explicit Buffer(size_t bytes, unsigned char fill = 0xa5) : p_(std::malloc(bytes == 0 ? 1 : bytes)), n_(bytes) {
    if (p_ == nullptr) std::abort();
    std::memset(p_, fill, bytes == 0 ? 1 : bytes);
  }
  ~Buffer() { std::free(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return n_; }

 private:
  void* p_;
  size_t n_;
};

// A wrong answer is a crash to libFuzzer: it then keeps the input.
#define FUZZ_EXPECT(cond, ...)                                      \
  do {                                                              \
    if (!(cond)) {                                                  \
      std::fprintf(stderr, "fuzz: %s:%d: expected %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                            \
      std::fprintf(stderr, " (last error: %s)\n", weftGetLastError()); \
      std::abort();                                                 \
    }                                                               \
  } while (0)

}  // namespace weft_fuzz

#endif  // WEFT_FUZZ_INPUT_H_

// Element types and the scalar conversions every layer shares.
//
// The enum values equal weftDataType_t / weftRedOp_t, so the C ABI casts
// straight through. The float16 and bfloat16 conversions round to nearest
// even exactly as PyTorch's .to(torch.float16) / .to(torch.bfloat16) do:
// NaN stays NaN (quiet), overflow becomes inf, subnormals are kept. They are
// the scalar specification that kernels/ and the backends build on.
//
//   uint16_t h = weft::FloatToHalf(1.0f / 3);   // 0x3555
//   float f = weft::HalfToFloat(h);
#ifndef WEFT_CORE_DTYPE_H_
#define WEFT_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace weft {

// kInt16 was appended after kInt64: values never move (they are the ABI's).
enum class DataType : int {
  kFloat32 = 0, kFloat16 = 1, kBfloat16 = 2, kFloat64 = 3,
  kInt8 = 4, kUint8 = 5, kInt32 = 6, kInt64 = 7, kInt16 = 8,
};
inline constexpr int kNumDataTypes = 9;

enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
inline constexpr int kNumRedOps = 5;

enum class MemKind : int { kHost = 0, kCuda = 1 };

inline bool IsValid(DataType t) { return static_cast<int>(t) >= 0 && static_cast<int>(t) < kNumDataTypes; }
inline bool IsValid(RedOp op) { return static_cast<int>(op) >= 0 && static_cast<int>(op) < kNumRedOps; }

size_t ElementSize(DataType t);   // 0 for an invalid type
const char* Name(DataType t);     // "float32", ...; "invalid" out of range
const char* Name(RedOp op);       // "sum", ...
const char* Name(MemKind m);      // "host", "cuda"
bool IsFloating(DataType t);
bool IsHalf(DataType t);          // float16 or bfloat16: reduced in float32

// Bit casts.
inline uint32_t FloatBits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float BitsFloat(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint64_t DoubleBits(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
inline double BitsDouble(uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }

// bfloat16 is the top half of a float32: widening is exact.
inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

// Round to nearest even on the dropped 16 bits; NaN keeps its sign and is quieted.
inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float HalfToFloat(uint16_t h);      // exact
uint16_t FloatToHalf(float f);      // RNE, subnormals kept, overflow to inf
// From double, rounded once (not via float, which could round twice).
uint16_t DoubleToHalf(double d);
uint16_t DoubleToBf16(double d);

}  // namespace weft

#endif  // WEFT_CORE_DTYPE_H_

#include "core/dtype.h"

#include <cmath>

namespace weft {

size_t ElementSize(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat16: return 2;
    case DataType::kBfloat16: return 2;
    case DataType::kFloat64: return 8;
    case DataType::kInt8: return 1;
    case DataType::kUint8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kInt16: return 2;
  }
  return 0;
}

const char* Name(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat16: return "float16";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kFloat64: return "float64";
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kInt16: return "int16";
  }
  return "invalid";
}

const char* Name(RedOp op) {
  switch (op) {
    case RedOp::kSum: return "sum";
    case RedOp::kProd: return "prod";
    case RedOp::kMax: return "max";
    case RedOp::kMin: return "min";
    case RedOp::kAvg: return "avg";
  }
  return "invalid";
}

const char* Name(MemKind m) { return m == MemKind::kCuda ? "cuda" : "host"; }

bool IsFloating(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBfloat16 ||
         t == DataType::kFloat64;
}

bool IsHalf(DataType t) { return t == DataType::kFloat16 || t == DataType::kBfloat16; }

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (man << 13));  // inf, NaN
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in float.
  const float mag = std::ldexp(static_cast<float>(man), -24);
  return sign ? -mag : mag;
}

namespace {

// Rounds |x| (finite, as a double: every float and the halves' range is
// exact there) to float16 bits with round-to-nearest-even.
uint16_t MagnitudeToHalf(double a) {
  if (a >= 65520.0) return 0x7c00u;  // rounds to inf (65504 + half an ulp)
  if (a < 0x1p-14) {
    // Subnormal: units of 2^-24. nearbyint rounds half to even.
    return static_cast<uint16_t>(std::nearbyint(a * 0x1p24));  // 0x400 here is the smallest normal
  }
  int e;
  const double m = std::frexp(a, &e);          // a = m * 2^e, m in [0.5, 1)
  // 11 significant bits: scale so the integer part holds them.
  double q = std::nearbyint(std::ldexp(m, 11));  // in [1024, 2048]
  int exp = e - 1;                               // a = (q / 1024) * 2^exp
  if (q == 2048.0) { q = 1024.0; ++exp; }
  if (exp > 15) return 0x7c00u;
  return static_cast<uint16_t>(((exp + 15) << 10) | (static_cast<uint32_t>(q) - 1024u));
}

}  // namespace

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  if ((u & 0x7fffffffu) == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | MagnitudeToHalf(std::fabs(static_cast<double>(f))));
}

uint16_t DoubleToHalf(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0;
  if (std::isnan(d)) return static_cast<uint16_t>(sign | 0x7e00u);
  if (std::isinf(d)) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | MagnitudeToHalf(std::fabs(d)));
}

uint16_t DoubleToBf16(double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0;
  if (std::isnan(d)) return static_cast<uint16_t>(sign | 0x7fc0u);
  const double a = std::fabs(d);
  if (std::isinf(a)) return static_cast<uint16_t>(sign | 0x7f80u);
  // bfloat16 has float32's exponent range and 8 significant bits.
  if (a < 0x1p-126) {  // subnormal: units of 2^-133
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p133)));
  }
  int e;
  const double m = std::frexp(a, &e);
  double q = std::nearbyint(std::ldexp(m, 8));  // [128, 256]
  int exp = e - 1;
  if (q == 256.0) { q = 128.0; ++exp; }
  if (exp > 127) return static_cast<uint16_t>(sign | 0x7f80u);
  return static_cast<uint16_t>(sign | ((exp + 127) << 7) | (static_cast<uint32_t>(q) - 128u));
}

}  // namespace weft

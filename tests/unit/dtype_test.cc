// The scalar conversions in core/dtype.h are the specification the kernels
// and the backends are tested against, so they are checked here against
// first principles: exhaustively over every 16-bit pattern, and on random
// floats against the two neighbouring representable values.
#include "core/dtype.h"

#include <cmath>
#include <cstdint>
#include <random>

#include <gtest/gtest.h>

namespace weft {
namespace {

bool IsNanHalf(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsNanBf16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

TEST(Dtype, ElementSizesAndNames) {
  EXPECT_EQ(ElementSize(DataType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DataType::kBfloat16), 2u);
  EXPECT_EQ(ElementSize(DataType::kInt64), 8u);
  EXPECT_EQ(ElementSize(DataType::kInt16), 2u);
  EXPECT_STREQ(Name(DataType::kInt16), "int16");
  // Appended: the values before it are the C ABI's and never move.
  EXPECT_EQ(static_cast<int>(DataType::kInt16), 8);
  EXPECT_EQ(kNumDataTypes, 9);
  EXPECT_TRUE(IsValid(DataType::kInt16));
  EXPECT_FALSE(IsValid(static_cast<DataType>(kNumDataTypes)));
  EXPECT_FALSE(IsFloating(DataType::kInt16));
  EXPECT_EQ(ElementSize(static_cast<DataType>(99)), 0u);
  EXPECT_STREQ(Name(DataType::kFloat16), "float16");
  EXPECT_STREQ(Name(static_cast<DataType>(-1)), "invalid");
  EXPECT_STREQ(Name(RedOp::kAvg), "avg");
}

// Widening is exact: every finite half is the value its fields encode.
// (Round trips and midpoints are dtype_convert_test.cc's.)
TEST(Dtype, HalfWidensExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (IsNanHalf(static_cast<uint16_t>(h))) continue;
    const int exp = (h >> 10) & 0x1f;
    const int man = h & 0x3ff;
    double want = exp == 0 ? std::ldexp(man, -24) : exp == 31 ? INFINITY : std::ldexp(1024 + man, exp - 25);
    if (h & 0x8000u) want = -want;
    EXPECT_EQ(static_cast<double>(HalfToFloat(static_cast<uint16_t>(h))), want) << h;
  }
}

// Nearest-even by brute force: the result is one of the two bracketing
// representable values, the nearer one, and the even one on a tie.
template <typename ToBits, typename FromBits>
void CheckNearestEven(double x, uint16_t got, ToBits, FromBits from, uint16_t inf_bits) {
  const double g = from(got);
  if (std::isinf(g)) {
    // Overflow: x must be at least halfway past the largest finite value.
    const double maxf = from(static_cast<uint16_t>(inf_bits - 1));
    const double ulp = maxf - from(static_cast<uint16_t>(inf_bits - 2));
    EXPECT_GE(std::fabs(x), maxf + ulp / 2) << x;
    return;
  }
  // Neighbours of the result in magnitude.
  const uint16_t mag = got & 0x7fffu, sign = got & 0x8000u;
  const double up = from(static_cast<uint16_t>(sign | (mag + 1)));
  const double down = mag == 0 ? -from(static_cast<uint16_t>(sign | 1)) : from(static_cast<uint16_t>(sign | (mag - 1)));
  const double err = std::fabs(x - g);
  EXPECT_LE(err, std::fabs(x - up)) << x;
  EXPECT_LE(err, std::fabs(x - down)) << x;
  if (err == std::fabs(x - up) || err == std::fabs(x - down)) {
    EXPECT_EQ(got & 1u, 0u) << "tie not to even: " << x;
  }
}

TEST(Dtype, RandomFloatsRoundToNearestEven) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns cover every exponent, including subnormals.
    const float f = BitsFloat(bits(rng));
    if (std::isnan(f) || std::isinf(f)) continue;
    const double x = f;
    CheckNearestEven(x, FloatToHalf(f), 0, [](uint16_t h) { return static_cast<double>(HalfToFloat(h)); }, 0x7c00);
    CheckNearestEven(x, FloatToBf16(f), 0, [](uint16_t h) { return static_cast<double>(Bf16ToFloat(h)); }, 0x7f80);
    EXPECT_EQ(DoubleToHalf(x), FloatToHalf(f));
    EXPECT_EQ(DoubleToBf16(x), FloatToBf16(f));
  }
}

TEST(Dtype, DoubleRoundsOnceNotTwice) {
  // 1 + 2^-11 + 2^-40 is just above the half-way point between two halves:
  // rounding via float (which drops 2^-40) would land on the tie and round
  // down to even; rounding once from double rounds up.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(DoubleToHalf(x), 0x3c01u);
  EXPECT_EQ(FloatToHalf(static_cast<float>(x)), 0x3c00u);
  const double y = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(DoubleToBf16(y), 0x3f81u);
}

TEST(Dtype, SpecialValues) {
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00u);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00u);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000u);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000u);  // tie to even (zero)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001u);
  EXPECT_EQ(FloatToBf16(3.0e38f), 0x7f62u);
  EXPECT_EQ(FloatToBf16(3.4e38f), 0x7f80u);  // rounds past the largest finite
  EXPECT_TRUE(IsNanBf16(FloatToBf16(NAN)));
  EXPECT_TRUE(IsNanHalf(FloatToHalf(-NAN)));
  EXPECT_EQ(FloatToHalf(-NAN) & 0x8000u, 0x8000u);
}

}  // namespace
}  // namespace weft

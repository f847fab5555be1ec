// core/dtype.h's scalar conversions, the specification under every kernel,
// tested exhaustively where that is cheap: every float16 and bfloat16 value
// round-trips, and for every pair of neighbours the exact midpoint rounds to
// the even one while a hair above or below rounds to the nearer one. From
// float64 the hair is far below float32's resolution, which catches double
// rounding through float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace weft {
namespace {

bool HalfIsNaN(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
bool Bf16IsNaN(uint16_t h) { return (h & 0x7fffu) > 0x7f80u; }

TEST(DtypeConvert, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    if (HalfIsNaN(x)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(x)));
      EXPECT_TRUE(HalfIsNaN(FloatToHalf(HalfToFloat(x))));
      continue;
    }
    ASSERT_EQ(FloatToHalf(HalfToFloat(x)), x) << std::hex << h;
    ASSERT_EQ(DoubleToHalf(HalfToFloat(x)), x) << std::hex << h;
  }
}

TEST(DtypeConvert, EveryBf16RoundTrips) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    if (Bf16IsNaN(x)) {
      EXPECT_TRUE(Bf16IsNaN(FloatToBf16(Bf16ToFloat(x))));
      continue;
    }
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(x)), x) << std::hex << h;
    ASSERT_EQ(DoubleToBf16(Bf16ToFloat(x)), x) << std::hex << h;
  }
}

// For neighbours lo < hi (positive, finite), checks the rounding of their
// midpoint and of values just beside it, from float and from double.
template <typename FromBits, typename FromFloat, typename FromDouble>
void CheckMidpoints(uint16_t max_finite, FromBits from_bits, FromFloat f, FromDouble d) {
  for (uint16_t lo = 0; lo < max_finite; ++lo) {
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double a = from_bits(lo), b = from_bits(hi);
    const double mid = (a + b) / 2;  // exact: both have few significant bits
    const uint16_t even = (lo & 1) == 0 ? lo : hi;
    ASSERT_EQ(f(static_cast<float>(mid)), even) << std::hex << lo;
    ASSERT_EQ(d(mid), even) << std::hex << lo;
    ASSERT_EQ(f(std::nextafter(static_cast<float>(mid), 0.0f)), lo) << std::hex << lo;
    ASSERT_EQ(f(std::nextafter(static_cast<float>(mid), INFINITY)), hi) << std::hex << lo;
    ASSERT_EQ(d(std::nextafter(mid, 0.0)), lo) << std::hex << lo;
    ASSERT_EQ(d(std::nextafter(mid, INFINITY)), hi) << std::hex << lo;
    // Negative values mirror positive ones.
    ASSERT_EQ(d(-std::nextafter(mid, INFINITY)), hi | 0x8000) << std::hex << lo;
  }
}

TEST(DtypeConvert, HalfRoundsToNearestEvenIncludingSubnormals) {
  CheckMidpoints(0x7bff, [](uint16_t h) { return static_cast<double>(HalfToFloat(h)); }, FloatToHalf,
                 DoubleToHalf);
}

TEST(DtypeConvert, Bf16RoundsToNearestEvenIncludingSubnormals) {
  CheckMidpoints(0x7f7f, [](uint16_t h) { return static_cast<double>(Bf16ToFloat(h)); }, FloatToBf16,
                 DoubleToBf16);
}

TEST(DtypeConvert, OverflowSignedZerosAndInfinities) {
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // the midpoint to "65536" rounds to even: inf
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(DoubleToHalf(1e300), 0x7c00);
  EXPECT_EQ(FloatToBf16(3.4028235e38f), 0x7f80);  // rounds up past bfloat16's largest
  EXPECT_EQ(DoubleToBf16(1e300), 0x7f80);
  EXPECT_EQ(DoubleToBf16(-1e300), 0xff80);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(DoubleToHalf(-0.0), 0x8000);
  EXPECT_EQ(DoubleToBf16(-0.0), 0x8000);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);               // half of the smallest subnormal: to even, 0
  EXPECT_EQ(FloatToHalf(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToBf16(0x1p-149f), 0x0000);               // float32's smallest subnormal: below bf16's half-ulp
  EXPECT_TRUE(HalfIsNaN(FloatToHalf(NAN)));
  EXPECT_TRUE(Bf16IsNaN(FloatToBf16(-NAN)));
  EXPECT_TRUE(HalfIsNaN(DoubleToHalf(NAN)));
  EXPECT_TRUE(Bf16IsNaN(DoubleToBf16(NAN)));
}

TEST(DtypeConvert, DoubleRoundsOnceNotTwice) {
  // 1 + 2^-11 + 2^-40 is above the float16 midpoint between 1 and 1 + 2^-10,
  // but through float32 it becomes exactly the midpoint and rounds down to even.
  const double x = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(FloatToHalf(static_cast<float>(x)), 0x3c00);
  EXPECT_EQ(DoubleToHalf(x), 0x3c01);
  const double y = 1.0 + 0x1p-8 + 0x1p-40;  // the same for bfloat16
  EXPECT_EQ(FloatToBf16(static_cast<float>(y)), 0x3f80);
  EXPECT_EQ(DoubleToBf16(y), 0x3f81);
}

}  // namespace
}  // namespace weft

// core/reduce.h: accumulation types, op semantics and rounding of the
// reductions that every host backend builds on.
#include "core/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace weft {
namespace {

// Reduces `inputs` (one vector per rank) the way a backend does.
template <typename T>
std::vector<T> Reduce(DataType t, RedOp op, const std::vector<std::vector<T>>& inputs) {
  const size_t n = inputs[0].size();
  std::vector<unsigned char> acc(n * AccumSize(t));
  ToAccum(t, inputs[0].data(), acc.data(), n);
  for (size_t r = 1; r < inputs.size(); ++r) AccumulateInto(t, op, acc.data(), inputs[r].data(), n);
  std::vector<T> out(n);
  FromAccum(t, op, static_cast<int>(inputs.size()), acc.data(), out.data(), n);
  return out;
}

TEST(Reduce, AccumTypes) {
  EXPECT_EQ(AccumType(DataType::kBfloat16), DataType::kFloat32);
  EXPECT_EQ(AccumType(DataType::kFloat16), DataType::kFloat32);
  EXPECT_EQ(AccumType(DataType::kInt8), DataType::kInt64);
  EXPECT_EQ(AccumType(DataType::kInt16), DataType::kInt64);
  EXPECT_EQ(AccumType(DataType::kFloat64), DataType::kFloat64);
  EXPECT_TRUE(AccumIsSelf(DataType::kFloat32));
}

TEST(Reduce, Float32OpsMatchDouble) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-4, 4);
  std::vector<std::vector<float>> in(3, std::vector<float>(1000));
  for (auto& v : in) for (auto& x : v) x = dist(rng);
  for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg}) {
    const auto out = Reduce<float>(DataType::kFloat32, op, in);
    for (size_t i = 0; i < out.size(); ++i) {
      const double a = in[0][i], b = in[1][i], c = in[2][i];
      double want = 0;
      switch (op) {
        case RedOp::kSum: want = a + b + c; break;
        case RedOp::kProd: want = a * b * c; break;
        case RedOp::kMax: want = std::max({a, b, c}); break;
        case RedOp::kMin: want = std::min({a, b, c}); break;
        case RedOp::kAvg: want = (a + b + c) / 3; break;
      }
      EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::fabs(want))) << Name(op) << " at " << i;
    }
  }
}

// bfloat16 sums are rounded once from float32, not after every rank.
TEST(Reduce, Bf16RoundsOnce) {
  // 256 + 1 + 1: bfloat16 has 8 significant bits, so 256 + 1 rounds back to
  // 256 at every step, while the float32 sum 258 is representable.
  const uint16_t a = FloatToBf16(256.0f), one = FloatToBf16(1.0f);
  const auto out = Reduce<uint16_t>(DataType::kBfloat16, RedOp::kSum, {{a}, {one}, {one}});
  EXPECT_EQ(Bf16ToFloat(out[0]), 258.0f);
}

TEST(Reduce, HalfAvgDividesInFloat32) {
  const uint16_t x = FloatToHalf(60000.0f);
  // The float16 sum would overflow to inf; float32 accumulation does not.
  const auto out = Reduce<uint16_t>(DataType::kFloat16, RedOp::kAvg, {{x}, {x}, {x}, {x}});
  EXPECT_EQ(HalfToFloat(out[0]), HalfToFloat(x));
  const auto sum = Reduce<uint16_t>(DataType::kFloat16, RedOp::kSum, {{x}, {x}});
  EXPECT_TRUE(std::isinf(HalfToFloat(sum[0])));
}

TEST(Reduce, IntegerAvgTruncatesTowardZero) {
  const auto out = Reduce<int8_t>(DataType::kInt8, RedOp::kAvg, {{100, -3, 127}, {101, 0, 127}});
  EXPECT_EQ(out, (std::vector<int8_t>{100, -1, 127}));  // 127+127 does not overflow the int64 accumulator
}

TEST(Reduce, IntegerSumWraps) {
  const auto out = Reduce<int8_t>(DataType::kInt8, RedOp::kSum, {{100}, {100}});
  EXPECT_EQ(out[0], static_cast<int8_t>(-56));
  const auto big = Reduce<int64_t>(DataType::kInt64, RedOp::kSum, {{INT64_MAX}, {1}});
  EXPECT_EQ(big[0], INT64_MIN);
  const auto u = Reduce<uint8_t>(DataType::kUint8, RedOp::kMax, {{3, 250}, {200, 7}});
  EXPECT_EQ(u, (std::vector<uint8_t>{200, 250}));
}

// int16 as the other integer types: an int64 accumulator, wrapped to 16 bits
// at the end, so sums and products are int16's own wrapping arithmetic
// however many ranks there are, and avg divides the exact sum.
TEST(Reduce, Int16WrapsAndAveragesTheExactSum) {
  const std::vector<std::vector<int16_t>> in = {{30000, -32768, 300, -7, 32767, 2},
                                                {30000, -1, 300, 2, 32767, -3},
                                                {10000, -32768, -300, 5, 1, 5}};
  // Sums 70000, -65537, 300, 0, 65535, 4, modulo 2^16.
  EXPECT_EQ(Reduce<int16_t>(DataType::kInt16, RedOp::kSum, in),
            (std::vector<int16_t>{4464, -1, 300, 0, -1, 4}));
  // Products 9e12, -2^30, -27e6, -70, (2^15 - 1)^2, -30, modulo 2^16.
  EXPECT_EQ(Reduce<int16_t>(DataType::kInt16, RedOp::kProd, in),
            (std::vector<int16_t>{-28672, 0, 832, -70, 1, -30}));
  EXPECT_EQ(Reduce<int16_t>(DataType::kInt16, RedOp::kMax, in),
            (std::vector<int16_t>{30000, -1, 300, 5, 32767, 5}));
  EXPECT_EQ(Reduce<int16_t>(DataType::kInt16, RedOp::kMin, in),
            (std::vector<int16_t>{10000, -32768, -300, -7, 1, -3}));
  // avg: 70000/3, -65537/3, 300/3, 0/3, 65535/3, 4/3, truncated toward zero;
  // the int16 sums would have wrapped, the int64 accumulator does not.
  EXPECT_EQ(Reduce<int16_t>(DataType::kInt16, RedOp::kAvg, in),
            (std::vector<int16_t>{23333, -21845, 100, 0, 21845, 1}));
}

TEST(Reduce, CombineAccumMatchesAccumulate) {
  std::vector<float> a = {1, 2, 3}, b = {4, -5, 6};
  CombineAccum(DataType::kBfloat16, RedOp::kMin, a.data(), b.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{1, -5, 3}));
}

// ReduceBlocked (one pass per block, the shared-memory collectives' path)
// gives ReduceInRankOrder's bits for every type, op and rank count, across
// block boundaries, with the output over any one of the sources.
TEST(Reduce, BlockedMatchesRankOrderBitForBit) {
  std::mt19937 rng(7);
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBfloat16,
                            DataType::kInt8,    DataType::kUint8,   DataType::kInt16,   DataType::kInt32,
                            DataType::kInt64};
  const size_t n = 3 * kReduceBlockBytes / 4 + 5;  // several blocks of every accumulator width, and a tail
  for (DataType t : types) {
    const size_t es = ElementSize(t);
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg}) {
      for (int nranks = 1; nranks <= 5; ++nranks) {
        std::vector<std::vector<unsigned char>> in(static_cast<size_t>(nranks), std::vector<unsigned char>(n * es));
        for (auto& v : in) {
          for (size_t i = 0; i < n; ++i) {
            // Values whose products and sums stay finite: small integers, or
            // floating point numbers in [-2, 2) with their low bits set.
            const double x = std::uniform_int_distribution<int>(-64, 63)(rng) / 32.0 + 1e-3;
            switch (t) {
              case DataType::kFloat32: { float f = static_cast<float>(x); std::memcpy(&v[i * es], &f, es); break; }
              case DataType::kFloat64: std::memcpy(&v[i * es], &x, es); break;
              case DataType::kFloat16: { uint16_t h = FloatToHalf(static_cast<float>(x)); std::memcpy(&v[i * es], &h, es); break; }
              case DataType::kBfloat16: { uint16_t h = FloatToBf16(static_cast<float>(x)); std::memcpy(&v[i * es], &h, es); break; }
              default: { int64_t k = std::uniform_int_distribution<int>(-100, 100)(rng); std::memcpy(&v[i * es], &k, es); break; }
            }
          }
        }
        auto src = [&](int q) -> const void* { return in[static_cast<size_t>(q)].data(); };
        std::vector<unsigned char> want(n * es), acc(n * AccumSize(t)), got(n * es);
        ReduceInRankOrder(t, op, nranks, src, n, acc.data(), want.data());
        ReduceBlocked(t, op, nranks, src, n, got.data());
        ASSERT_EQ(got, want) << Name(t) << " " << Name(op) << " over " << nranks << " ranks";
        for (int over = 0; over < nranks; ++over) {
          std::vector<std::vector<unsigned char>> copy = in;
          auto csrc = [&](int q) -> const void* { return copy[static_cast<size_t>(q)].data(); };
          ReduceBlocked(t, op, nranks, csrc, n, copy[static_cast<size_t>(over)].data());
          ASSERT_EQ(copy[static_cast<size_t>(over)], want)
              << Name(t) << " " << Name(op) << " over " << nranks << " ranks, into source " << over;
        }
      }
    }
  }
}

TEST(Reduce, CombineToAccumIsToAccumThenAccumulate) {
  const std::vector<uint16_t> a = {FloatToBf16(256.0f), FloatToBf16(-3.0f)}, b = {FloatToBf16(1.0f), FloatToBf16(7.5f)};
  std::vector<float> fused(2), staged(2);
  CombineToAccum(DataType::kBfloat16, RedOp::kSum, a.data(), b.data(), fused.data(), 2);
  ToAccum(DataType::kBfloat16, a.data(), staged.data(), 2);
  AccumulateInto(DataType::kBfloat16, RedOp::kSum, staged.data(), b.data(), 2);
  EXPECT_EQ(fused, staged);
  EXPECT_EQ(fused, (std::vector<float>{257.0f, 4.5f}));
}

}  // namespace
}  // namespace weft

// Unscale-and-check and the multi-tensor L2 norm through kernels/kernels.h,
// against the reference, with 1..500 tensors and inputs large enough to be
// spread over the thread pool. meson runs this binary under several
// WEFT_NUM_THREADS values: the norm must give the reference's bits every time.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kernels.h"
#include "kernels/reference/convert.h"
#include "kernels/reference/reference.h"
#include "tests/unit/kernels_test_util.h"

namespace weft {
namespace kernels {
namespace {

using testing::Buffer;
using testing::FillRandom;
using testing::FirstDifference;

constexpr DataType kMathTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};

std::vector<Buffer> RandomTensors(int n, size_t max_size, std::mt19937_64& rng, bool finite) {
  std::uniform_int_distribution<size_t> size(0, max_size);
  std::vector<Buffer> out;
  for (int i = 0; i < n; ++i) {
    const DataType t = kMathTypes[i % 3];
    out.emplace_back(t, i == 0 ? 65537 : size(rng), i % 5);
    FillRandom(out.back(), rng);
    if (finite) {
      for (size_t k = 0; k < out.back().count(); ++k) {
        if (!std::isfinite(reference::LoadFloat(out.back().data(), k, t))) {
          reference::StoreFloat(out.back().data(), k, t, 0.75f);
        }
      }
    }
  }
  return out;
}

TEST(KernelsUnscale, MatchesReferenceAndReportsNonFinite) {
  std::printf("thread pool: %d threads\n", ThreadPool::Default().threads());
  std::mt19937_64 rng(21);
  for (int n : {1, 3, 64, 500}) {
    for (bool finite : {true, false}) {
      std::vector<Buffer> got = RandomTensors(n, 5000, rng, finite);
      std::vector<Buffer> want = got;
      int found = 0, want_found = 0;
      ASSERT_TRUE(UnscaleCheckFinite(Refs(got), 1.0f / 1024, &found, nullptr).ok());
      reference::UnscaleCheckFinite(Refs(want), 1.0f / 1024, &want_found);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(FirstDifference(got[i], want[i]), -1) << "tensor " << i;
      EXPECT_EQ(found, want_found);
      EXPECT_EQ(found, finite ? 0 : 1) << n << " tensors";
    }
  }
}

TEST(KernelsUnscale, LeavesFlagAloneWhenFiniteAndFindsFloat16Overflow) {
  std::vector<uint16_t> h = {FloatToHalf(1.0f), FloatToHalf(60000.0f)};
  std::vector<TensorRef> t = {{h.data(), 2, DataType::kFloat16}};
  int found = 7;  // not touched when every result is finite
  ASSERT_TRUE(UnscaleCheckFinite(t, 0.5f, &found, nullptr).ok());
  EXPECT_EQ(found, 7);
  EXPECT_EQ(h[1], FloatToHalf(30000.0f));
  found = 0;
  ASSERT_TRUE(UnscaleCheckFinite(t, 4.0f, &found, nullptr).ok());  // 120000 overflows float16
  EXPECT_EQ(found, 1);
  EXPECT_EQ(h[1], 0x7c00);
}

TEST(KernelsNorm, MatchesReferenceBitForBit) {
  std::mt19937_64 rng(22);
  for (int n : {1, 2, 17, 500}) {
    std::vector<Buffer> x = RandomTensors(n, n > 100 ? 3000 : 70000, rng, /*finite=*/true);
    std::vector<float> norms(n, -1.0f), want(n, -2.0f);
    float total = -1.0f, want_total = -2.0f;
    ASSERT_TRUE(L2Norm(Refs(x), norms.data(), &total, nullptr).ok());
    reference::L2Norm(Refs(x), want.data(), &want_total);
    for (int i = 0; i < n; ++i) ASSERT_EQ(FloatBits(norms[i]), FloatBits(want[i])) << "tensor " << i;
    ASSERT_EQ(FloatBits(total), FloatBits(want_total));
    // Against a plain float64 sum: the blocking only reorders float64 additions.
    double sum = 0;
    for (Buffer& b : x) {
      for (size_t k = 0; k < b.count(); ++k) {
        const double v = reference::LoadFloat(b.data(), k, b.dtype());
        sum += v * v;
      }
    }
    EXPECT_NEAR(total, std::sqrt(sum), 1e-6 * std::sqrt(sum));
    float again = 0;
    ASSERT_TRUE(L2Norm(Refs(x), nullptr, &again, nullptr).ok());  // norms may be NULL
    EXPECT_EQ(FloatBits(again), FloatBits(total));
  }
}

TEST(KernelsNorm, LargeTensorSpreadOverThreadsIsDeterministic) {
  std::mt19937_64 rng(23);
  Buffer big(DataType::kFloat32, (size_t{3} << 20) + 123, 1);
  FillRandom(big, rng);
  for (size_t k = 0; k < big.count(); ++k) {
    if (!std::isfinite(static_cast<float*>(big.data())[k])) static_cast<float*>(big.data())[k] = 1e-3f;
  }
  std::vector<TensorRef> t = {big.ref()};
  float want_norm = 0, want_total = 0;
  reference::L2Norm(t, &want_norm, &want_total);
  for (int run = 0; run < 3; ++run) {
    float norm = 0, total = 0;
    ASSERT_TRUE(L2Norm(t, &norm, &total, nullptr).ok());
    ASSERT_EQ(FloatBits(norm), FloatBits(want_norm)) << "run " << run;
    ASSERT_EQ(FloatBits(total), FloatBits(want_total)) << "run " << run;
  }
}

TEST(KernelsNorm, InfAndNaNPropagate) {
  std::vector<float> a = {1.0f, INFINITY}, b = {NAN, 2.0f}, c = {3.0f, 4.0f};
  std::vector<TensorRef> t = {{a.data(), 2, DataType::kFloat32}, {b.data(), 2, DataType::kFloat32},
                              {c.data(), 2, DataType::kFloat32}};
  std::vector<float> norms(3);
  float total = 0;
  ASSERT_TRUE(L2Norm(t, norms.data(), &total, nullptr).ok());
  EXPECT_TRUE(std::isinf(norms[0]));
  EXPECT_TRUE(std::isnan(norms[1]));
  EXPECT_EQ(norms[2], 5.0f);
  EXPECT_TRUE(std::isnan(total));
}

TEST(KernelsFlatten, LargeListSpreadOverThreadsMatchesReference) {
  std::mt19937_64 rng(24);
  std::vector<Buffer> x = RandomTensors(40, 100000, rng, /*finite=*/false);
  size_t total = 0;
  for (Buffer& b : x) total += b.count();
  Buffer got(DataType::kBfloat16, total), want(DataType::kBfloat16, total);
  got.Poison();
  ASSERT_TRUE(Flatten(Refs(x), got.data(), DataType::kBfloat16, nullptr, 0.5f, nullptr).ok());
  reference::Flatten(Refs(x), want.data(), DataType::kBfloat16, nullptr, 0.5f);
  EXPECT_EQ(FirstDifference(got, want), -1);
}

}  // namespace
}  // namespace kernels
}  // namespace weft

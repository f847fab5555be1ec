#include "tests/common/shard_check.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/stream.h"

namespace weft {
namespace shard {

using kernels::TensorRef;

extern const std::vector<ParamSpec> kParams;
const std::vector<ParamSpec> kParams = {{"w1", {7, 3}}, {"b1", {7}}, {"w2", {2, 7}}, {"scale", {}}};

std::vector<std::vector<float>> FullValues(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2, 2);
  std::vector<std::vector<float>> full;
  for (const auto& p : kParams) {
    size_t n = 1;
    for (auto d : p.shape) n *= d;
    full.emplace_back(n);
    for (auto& x : full.back()) x = dist(rng);
  }
  return full;
}

float Grad(int r, size_t i, size_t j) { return static_cast<float>((r + 1) * (static_cast<int>(i + j) % 5 - 2)) / 4; }

std::vector<const float*> Ptrs(const std::vector<std::vector<float>>& v) {
  std::vector<const float*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

void CheckShardGroupStep(Communicator& c, const ShardGroupOptions& opts, bool use_stream) {
  const auto full = FullValues(11);
  const int world = c.size();
  {
    [[maybe_unused]] const int rank = c.rank();
    Communicator* comm = &c;
    BufferPool pool;
    auto g = ShardGroup::Create(comm, nullptr, kParams, opts, &pool);
    ASSERT_TRUE(g.ok()) << g.status();
    ShardGroup& group = **g;
    ASSERT_TRUE(group.LoadFromFull(Ptrs(full)).ok());

    HostStream stream;
    void* s = use_stream ? &stream : nullptr;
    ASSERT_TRUE(group.Unshard(s).ok());
    ASSERT_TRUE(stream.Synchronize().ok());
    EXPECT_GT(group.memory().unsharded_bytes, 0u);
    for (size_t i = 0; i < kParams.size(); ++i) {
      auto p = group.FullParam(static_cast<int>(i));
      ASSERT_TRUE(p.ok()) << p.status();
      for (size_t j = 0; j < full[i].size(); ++j) {
        const float want = full[i][j];
        float got;
        if (opts.param_dtype == DataType::kBfloat16) {
          EXPECT_EQ(static_cast<uint16_t*>(*p)[j], FloatToBf16(want)) << "param " << i << " elem " << j;
          continue;
        }
        got = static_cast<float*>(*p)[j];
        EXPECT_EQ(got, want) << "param " << i << " elem " << j;
      }
    }

    // The same values into a buffer the caller owns.
    const size_t es = ElementSize(opts.param_dtype);
    std::vector<unsigned char> mine(group.full_numel() * es, 0xAB);
    ASSERT_TRUE(group.UnshardInto(mine.data(), s).ok());
    ASSERT_TRUE(stream.Synchronize().ok());
    for (size_t i = 0; i < kParams.size(); ++i) {
      auto p = group.FullParam(static_cast<int>(i));
      ASSERT_TRUE(p.ok());
      EXPECT_EQ(std::memcmp(mine.data() + group.full_offset(static_cast<int>(i)) * es, *p, full[i].size() * es), 0)
          << "param " << i;
    }

    // Two micro-batches of gradients accumulate into the fp32 shard.
    std::vector<std::vector<float>> grads(kParams.size());
    std::vector<TensorRef> refs;
    for (size_t i = 0; i < kParams.size(); ++i) {
      grads[i].resize(full[i].size());
      for (size_t j = 0; j < grads[i].size(); ++j) grads[i][j] = Grad(rank, i, j);
      refs.push_back({grads[i].data(), grads[i].size(), DataType::kFloat32});
    }
    for (int micro = 0; micro < 2; ++micro) ASSERT_TRUE(group.ReduceGrads(refs, s).ok());
    ASSERT_TRUE(stream.Synchronize().ok());
    ASSERT_TRUE(group.Reshard().ok());
    EXPECT_EQ(group.memory().unsharded_bytes, 0u);
    EXPECT_EQ(pool.stats().live_bytes, 0u);

    // Shard element k of parameter i holds 2 * mean over ranks of Grad(r, i, j).
    const auto sh = group.grads();
    for (const ParamShard& ps : group.shards()) {
      for (size_t k = 0; k < ps.length; ++k) {
        float mean = 0;
        for (int r = 0; r < world; ++r) mean += Grad(r, ps.param, ps.param_offset + k);
        mean /= static_cast<float>(world);
        EXPECT_EQ(sh[ps.shard_offset + k], 2 * mean) << "param " << ps.param << " elem " << ps.param_offset + k;
      }
    }
  }
}

}  // namespace shard
}  // namespace weft

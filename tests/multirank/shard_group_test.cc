// shard/shard_group.h over in-process ranks: unshard gives back the full
// parameters (cast once to the compute dtype), gradient reduction averages
// over ranks into the fp32 shards and accumulates, HSDP and ZeRO-1 reduce
// the same values, full state round-trips, and memory returns to the pool.
//
// Gradients are small integers (times 1/4), so every float sum and average
// here is exact and results are compared bit for bit.
#include "shard/shard_group.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/stream.h"
#include "tests/common/shard_check.h"
#include "tests/multirank/harness.h"

namespace weft {
namespace shard {
namespace {

using kernels::TensorRef;
using testing::RunRanksExpecting;

void CheckGroup(int world, const ShardGroupOptions& opts, bool use_stream) {
  RunRanksExpecting(world, [&](Communicator& c) { CheckShardGroupStep(c, opts, use_stream); });
}

TEST(ShardGroup, FlatFp32) { for (int w : {1, 2, 3}) CheckGroup(w, {}, false); }

TEST(ShardGroup, PerParamOnAStream) {
  ShardGroupOptions o;
  o.layout = LayoutKind::kPerParam;
  for (int w : {2, 3}) CheckGroup(w, o, true);
}

TEST(ShardGroup, Bf16ComputeAndReduce) {
  ShardGroupOptions o;
  o.param_dtype = DataType::kBfloat16;
  o.reduce_dtype = DataType::kBfloat16;
  CheckGroup(3, o, true);
  o.layout = LayoutKind::kPerParam;
  CheckGroup(2, o, false);
}

TEST(ShardGroup, ZeroOneAllReduces) {
  ShardGroupOptions o;
  o.reduction = GradReduction::kAllReduce;
  CheckGroup(3, o, false);
}

// Gradients already laid out as the unsharded buffer reduce to the same bits
// as separate gradient tensors, with the padding zeroed whatever it held.
TEST(ShardGroup, FlatGradientBufferMatchesSeparateGradients) {
  RunRanksExpecting(3, [&](Communicator& c) {
    const int rank = c.rank();
    BufferPool pool;
    auto a = ShardGroup::Create(&c, nullptr, kParams, {}, &pool);
    auto b = ShardGroup::Create(&c, nullptr, kParams, {}, &pool);
    ASSERT_TRUE(a.ok() && b.ok());
    std::vector<float> flat((*b)->full_numel(), 1e30f);  // junk in the padding
    std::vector<std::vector<float>> grads(kParams.size());
    std::vector<TensorRef> refs;
    for (size_t i = 0; i < kParams.size(); ++i) {
      grads[i].resize((*a)->layout().numel[i]);
      for (size_t j = 0; j < grads[i].size(); ++j) {
        grads[i][j] = Grad(rank, i, j) * 1.37f;
        flat[(*b)->full_offset(static_cast<int>(i)) + j] = grads[i][j];
      }
      refs.push_back({grads[i].data(), grads[i].size(), DataType::kFloat32});
    }
    HostStream stream;
    ASSERT_TRUE((*a)->ReduceGrads(refs, nullptr).ok());
    ASSERT_TRUE((*b)->ReduceGradsFlat(flat.data(), DataType::kFloat32, &stream).ok());
    ASSERT_TRUE(stream.Synchronize().ok());
    EXPECT_EQ(std::memcmp((*a)->grads().data(), (*b)->grads().data(), (*a)->grads().size() * sizeof(float)), 0);
    EXPECT_EQ((*b)->ReduceGradsFlat(flat.data(), DataType::kBfloat16, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST(ShardGroup, FullStateRoundTrips) {
  const auto full = FullValues(5);
  for (LayoutKind kind : {LayoutKind::kFlat, LayoutKind::kPerParam}) {
    RunRanksExpecting(3, [&](Communicator& c) {
    [[maybe_unused]] const int rank = c.rank();
    Communicator* comm = &c;
      BufferPool pool;
      ShardGroupOptions o;
      o.layout = kind;
      auto g = ShardGroup::Create(comm, nullptr, kParams, o, &pool);
      ASSERT_TRUE(g.ok());
      // Root scatters the state it holds; everyone's shard is its part of it.
      ASSERT_TRUE((*g)->ScatterFull(1, rank == 1 ? Ptrs(full) : std::vector<const float*>{}).ok());
      std::vector<std::vector<float>> back(kParams.size());
      std::vector<float*> out;
      for (size_t i = 0; i < kParams.size(); ++i) {
        back[i].assign(full[i].size(), NAN);
        out.push_back(back[i].data());
      }
      ASSERT_TRUE((*g)->GatherFull(0, out).ok());
      if (rank == 0) {
        EXPECT_EQ(back, full);
      } else {
        EXPECT_TRUE(std::isnan(back[0][0]));  // not the root: untouched
      }
      EXPECT_EQ(pool.stats().live_bytes, 0u);
    });
  }
}

TEST(ShardGroup, RootRefusalFailsEveryRank) {
  RunRanksExpecting(2, [&](Communicator& c) {
    [[maybe_unused]] const int rank = c.rank();
    Communicator* comm = &c;
    BufferPool pool;
    auto g = ShardGroup::Create(comm, nullptr, kParams, {}, &pool);
    ASSERT_TRUE(g.ok());
    const absl::Status s = (*g)->ScatterFull(0, {});  // root passes no parameters
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), rank == 0 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kUnavailable) << s;
  });
}

TEST(ShardGroup, MismatchedParameterListsAreRefused) {
  RunRanksExpecting(2, [&](Communicator& c) {
    [[maybe_unused]] const int rank = c.rank();
    Communicator* comm = &c;
    BufferPool pool;
    std::vector<ParamSpec> p = kParams;
    if (rank == 1) p[2].shape = {2, 8};
    auto g = ShardGroup::Create(comm, nullptr, p, {}, &pool);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition) << g.status();
  });
}

TEST(ShardGroup, HybridShardingMatchesPlainSharding) {
  // 4 ranks: shard over pairs {0,1} and {2,3}, replicate across them.
  RunRanksExpecting(4, [&](Communicator& c) {
    [[maybe_unused]] const int rank = c.rank();
    Communicator* comm = &c;
    auto shard_comm = comm->Split(rank / 2, rank);
    auto rep_comm = comm->Split(rank % 2, rank);
    ASSERT_TRUE(shard_comm.ok() && rep_comm.ok());
    BufferPool pool;
    auto g = ShardGroup::Create(shard_comm->get(), rep_comm->get(), kParams, {}, &pool);
    ASSERT_TRUE(g.ok()) << g.status();
    std::vector<std::vector<float>> grads(kParams.size());
    std::vector<TensorRef> refs;
    for (size_t i = 0; i < kParams.size(); ++i) {
      size_t n = 1;
      for (auto d : kParams[i].shape) n *= d;
      grads[i].resize(n);
      for (size_t j = 0; j < n; ++j) grads[i][j] = Grad(rank, i, j);
      refs.push_back({grads[i].data(), n, DataType::kFloat32});
    }
    ASSERT_TRUE((*g)->ReduceGrads(refs, nullptr).ok());
    for (const ParamShard& ps : (*g)->shards()) {
      for (size_t k = 0; k < ps.length; ++k) {
        float mean = 0;
        for (int r = 0; r < 4; ++r) mean += Grad(r, ps.param, ps.param_offset + k);
        EXPECT_EQ((*g)->grads()[ps.shard_offset + k], mean / 4);
      }
    }
  });
}

// ReshardAfter (the schedule's form of Reshard) returns the buffers on the
// stream at once, so the next Unshard enqueued on that stream reuses them
// (stream-ordered, as cudaFreeAsync on CUDA memory) while a host caller
// could not; the values gathered into the reused memory are the new ones.
TEST(ShardGroup, ReshardAfterReusesTheMemoryInStreamOrder) {
  const auto a = FullValues(21);
  const auto b = FullValues(22);
  RunRanksExpecting(2, [&](Communicator& c) {
    BufferPool pool;
    auto g = ShardGroup::Create(&c, nullptr, kParams, {}, &pool);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_EQ((*g)->memory_kind(), MemKind::kHost);
    HostStream stream;
    ASSERT_TRUE((*g)->LoadFromFull(Ptrs(a)).ok());
    ASSERT_TRUE((*g)->Unshard(&stream).ok());
    void* first = *(*g)->FullParam(0);
    ASSERT_TRUE((*g)->ReshardAfter(&stream).ok());
    EXPECT_EQ((*g)->memory().unsharded_bytes, 0u);
    EXPECT_EQ(pool.stats().live_bytes, 0u);
    EXPECT_GT(pool.stats().pooled_bytes, 0u);
    ASSERT_TRUE(stream.Synchronize().ok());
    ASSERT_TRUE((*g)->LoadFromFull(Ptrs(b)).ok());
    ASSERT_TRUE((*g)->Unshard(&stream).ok());
    EXPECT_EQ(*(*g)->FullParam(0), first);
    ASSERT_TRUE(stream.Synchronize().ok());
    for (size_t i = 0; i < kParams.size(); ++i) {
      const float* p = static_cast<const float*>(*(*g)->FullParam(static_cast<int>(i)));
      for (size_t j = 0; j < b[i].size(); ++j) ASSERT_EQ(p[j], b[i][j]) << "param " << i << " elem " << j;
    }
    // A pointer that is no live host stream is refused by a host group.
    int not_a_stream = 0;
    const absl::Status s = (*g)->ReshardAfter(&not_a_stream);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    ASSERT_TRUE((*g)->Reshard().ok());
    EXPECT_EQ(pool.stats().live_bytes, 0u);
  });
}

}  // namespace
}  // namespace shard
}  // namespace weft

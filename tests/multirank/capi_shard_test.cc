// Shard groups through the C ABI, two in-process ranks: the life of one
// FSDP unit (create, load, unshard, use, reduce gradients, reshard, gather the
// full state) and the memory report along the way.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace {

TEST(CApiShard, OneUnitThroughItsLife) {
  constexpr int kWorld = 2;
  std::vector<weftComm_t> comms(kWorld);
  ASSERT_EQ(weftCommInitInProcess(comms.data(), kWorld, nullptr), weftSuccess);
  // w: 3x5 = 15 elements, b: 5; flat total 20 -> 10 per rank.
  weftParamDesc_t params[2] = {{"w", 2, {3, 5}}, {"b", 1, {5}}};
  std::vector<float> w(15), b(5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f * static_cast<float>(i) - 3;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 10.0f + static_cast<float>(i);
  const float* full[2] = {w.data(), b.data()};

  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      weftShardGroupConfig_t cfg = WEFT_SHARD_GROUP_CONFIG_INITIALIZER;
      cfg.param_dtype = weftBfloat16;
      weftShardGroup_t g = nullptr;
      ASSERT_EQ(weftShardGroupCreate(comms[rank], nullptr, params, 2, &cfg, &g), weftSuccess) << weftGetLastError();
      weftShardDesc_t d;
      ASSERT_EQ(weftShardGroupGetShard(g, 1, &d), weftSuccess);
      // Rank 0 holds w[0..10); rank 1 holds w[10..15) and all of b.
      EXPECT_EQ(d.length, rank == 0 ? 0u : 5u);
      ASSERT_EQ(weftShardGroupLoadFull(g, full, 2), weftSuccess);
      float *master = nullptr, *grads = nullptr;
      size_t count = 0;
      ASSERT_EQ(weftShardGroupGetBuffers(g, &master, &grads, &count), weftSuccess);
      EXPECT_EQ(count, 10u);
      EXPECT_EQ(master[0], rank == 0 ? w[0] : w[10]);

      ASSERT_EQ(weftShardGroupUnshard(g, nullptr), weftSuccess) << weftGetLastError();
      void* fb = nullptr;
      ASSERT_EQ(weftShardGroupGetFullParam(g, 1, &fb), weftSuccess);
      uint16_t bits;
      std::memcpy(&bits, static_cast<char*>(fb) + 4 * sizeof(uint16_t), 2);
      EXPECT_EQ(bits, 0x4160u);  // bfloat16(14.0)
      weftShardMemory_t m;
      ASSERT_EQ(weftShardGroupGetMemory(g, &m), weftSuccess);
      EXPECT_EQ(m.unsharded_bytes, 20u * 2);

      // Gradients: rank r contributes (r + 1) everywhere; the average is 1.5.
      std::vector<float> gw(15, static_cast<float>(rank + 1)), gb(5, static_cast<float>(rank + 1));
      weftTensor_t gt[2] = {{gw.data(), 15, weftFloat32}, {gb.data(), 5, weftFloat32}};
      ASSERT_EQ(weftShardGroupReduceGrads(g, gt, 2, nullptr), weftSuccess) << weftGetLastError();
      for (size_t k = 0; k < count; ++k) EXPECT_EQ(grads[k], 1.5f) << k;
      ASSERT_EQ(weftShardGroupReshard(g), weftSuccess);
      ASSERT_EQ(weftShardGroupGetMemory(g, &m), weftSuccess);
      EXPECT_EQ(m.unsharded_bytes, 0u);
      EXPECT_EQ(m.pool_live_bytes, 0u);
      EXPECT_GT(m.pool_peak_bytes, 0u);

      // An optimizer step on the shard, then the full state on rank 0.
      for (size_t k = 0; k < count; ++k) master[k] -= grads[k];
      std::vector<float> ow(15, -1), ob(5, -1);
      float* out[2] = {ow.data(), ob.data()};
      ASSERT_EQ(weftShardGroupGatherFull(g, 0, out, 2), weftSuccess) << weftGetLastError();
      if (rank == 0) {
        for (size_t i = 0; i < 15; ++i) EXPECT_EQ(ow[i], w[i] - 1.5f);
        for (size_t i = 0; i < 5; ++i) EXPECT_EQ(ob[i], b[i] - 1.5f);
      }

      EXPECT_EQ(weftShardGroupGetFullParam(g, 0, &fb), weftInvalidUsage);
      EXPECT_NE(std::string(weftGetLastError()).find("sharded"), std::string::npos);
      EXPECT_EQ(weftShardGroupGetShard(g, 2, &d), weftInvalidArgument);
      EXPECT_NE(std::string(weftGetLastError()).find("param = 2"), std::string::npos);
      EXPECT_EQ(weftShardGroupReduceGrads(g, gt, 1, nullptr), weftInvalidArgument);
      EXPECT_EQ(weftShardGroupDestroy(g), weftSuccess);
      EXPECT_EQ(weftShardGroupZeroGrads(g), weftInvalidArgument);
    });
  }
  for (auto& t : ranks) t.join();
  for (auto c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

}  // namespace

// The shard schedule through the C ABI, three in-process ranks: a ZeRO-3
// step driven by weftShardSchedule* reduces the same gradient shards as one
// driven by hand, holds at most two groups gathered (exactly two once the
// recorded order allows prefetch), gathers into framework-owned memory
// through acquire/release, follows a declared order, and in ZeRO-2 gathers
// the updated shards anew each step.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace {

constexpr int kWorld = 3;

// Four groups of different sizes (padding with 3 ranks).
const std::vector<std::vector<std::vector<int64_t>>> kShapes = {{{11, 3}}, {{5, 5}, {5}}, {{7, 2}}, {{3, 3}, {2}}};

struct Rank {
  int rank = 0;
  std::vector<weftShardGroup_t> groups;
  std::vector<size_t> numel;  // per group, all parameters
};

// Full parameters are small integers (exact in fp32 and in the averages below).
float FullValue(size_t group, size_t k) { return static_cast<float>((group * 7 + k * 3) % 11) - 5.0f; }

Rank Build(weftComm_t comm, int rank) {
  Rank r;
  r.rank = rank;
  for (size_t gi = 0; gi < kShapes.size(); ++gi) {
    std::vector<weftParamDesc_t> descs;
    size_t total = 0;
    for (const auto& shape : kShapes[gi]) {
      weftParamDesc_t d{"p", static_cast<int>(shape.size()), {}};
      size_t n = 1;
      for (size_t k = 0; k < shape.size(); ++k) {
        d.shape[k] = shape[k];
        n *= static_cast<size_t>(shape[k]);
      }
      total += n;
      descs.push_back(d);
    }
    weftShardGroup_t g = nullptr;
    EXPECT_EQ(weftShardGroupCreate(comm, nullptr, descs.data(), static_cast<int>(descs.size()), nullptr, &g),
              weftSuccess) << weftGetLastError();
    std::vector<float> flat(total);
    for (size_t k = 0; k < total; ++k) flat[k] = FullValue(gi, k);
    std::vector<const float*> full;
    size_t at = 0;
    for (const auto& shape : kShapes[gi]) {
      full.push_back(flat.data() + at);
      size_t n = 1;
      for (int64_t e : shape) n *= static_cast<size_t>(e);
      at += n;
    }
    EXPECT_EQ(weftShardGroupLoadFull(g, full.data(), static_cast<int>(full.size())), weftSuccess);
    r.groups.push_back(g);
    r.numel.push_back(total);
  }
  return r;
}

// Gradients that depend on what was gathered (the first full value), so a
// stale or missing gather changes the result. Kept alive until EndStep.
struct Grads {
  std::vector<float> flat;
  std::vector<weftTensor_t> refs;
};

Grads MakeGrads(const Rank& r, size_t gi, float first) {
  Grads out;
  out.flat.resize(r.numel[gi]);
  for (size_t k = 0; k < out.flat.size(); ++k) out.flat[k] = first + static_cast<float>((k + r.rank) % 5);
  size_t at = 0;
  for (const auto& shape : kShapes[gi]) {
    size_t n = 1;
    for (int64_t e : shape) n *= static_cast<size_t>(e);
    out.refs.push_back({out.flat.data() + at, n, weftFloat32});
    at += n;
  }
  return out;
}

// `full`: where group gi's parameters are after a Pre call (pool: GetFullParam).
using FullOf = float* (*)(weftShardGroup_t, void*);

float* PoolFull(weftShardGroup_t g, void*) {
  void* p = nullptr;
  EXPECT_EQ(weftShardGroupGetFullParam(g, 0, &p), weftSuccess) << weftGetLastError();
  return static_cast<float*>(p);
}

void ScheduledStep(Rank& r, weftShardSchedule_t s, FullOf full_of, void* user) {
  std::vector<Grads> keep;
  keep.reserve(r.groups.size());
  ASSERT_EQ(weftShardScheduleBeginStep(s), weftSuccess) << weftGetLastError();
  for (size_t gi = 0; gi < r.groups.size(); ++gi) {
    ASSERT_EQ(weftShardSchedulePreForward(s, r.groups[gi]), weftSuccess) << weftGetLastError();
    const float* f = full_of(r.groups[gi], user);
    for (size_t k = 0; k < r.numel[gi]; ++k) ASSERT_EQ(f[k], FullValue(gi, k)) << "group " << gi << " k " << k;
    ASSERT_EQ(weftShardSchedulePostForward(s, r.groups[gi]), weftSuccess);
  }
  for (size_t gi = r.groups.size(); gi-- > 0;) {
    ASSERT_EQ(weftShardSchedulePreBackward(s, r.groups[gi]), weftSuccess) << weftGetLastError();
    keep.push_back(MakeGrads(r, gi, full_of(r.groups[gi], user)[0]));
    ASSERT_EQ(weftShardSchedulePostBackward(s, r.groups[gi], keep.back().refs.data(),
                                            static_cast<int>(keep.back().refs.size())), weftSuccess)
        << weftGetLastError();
  }
  ASSERT_EQ(weftShardScheduleEndStep(s), weftSuccess) << weftGetLastError();
}

void ManualStep(Rank& r) {
  for (size_t gi = r.groups.size(); gi-- > 0;) {
    ASSERT_EQ(weftShardGroupUnshard(r.groups[gi], nullptr), weftSuccess);
    Grads g = MakeGrads(r, gi, PoolFull(r.groups[gi], nullptr)[0]);
    ASSERT_EQ(weftShardGroupReduceGrads(r.groups[gi], g.refs.data(), static_cast<int>(g.refs.size()), nullptr),
              weftSuccess);
    ASSERT_EQ(weftShardGroupReshard(r.groups[gi]), weftSuccess);
  }
}

void ExpectSameGrads(const Rank& a, const Rank& b) {
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    float *ga = nullptr, *gb = nullptr;
    size_t na = 0, nb = 0;
    ASSERT_EQ(weftShardGroupGetBuffers(a.groups[gi], nullptr, &ga, &na), weftSuccess);
    ASSERT_EQ(weftShardGroupGetBuffers(b.groups[gi], nullptr, &gb, &nb), weftSuccess);
    ASSERT_EQ(na, nb);
    EXPECT_EQ(std::memcmp(ga, gb, na * sizeof(float)), 0) << "group " << gi;
  }
}

void Destroy(Rank& r) {
  for (auto g : r.groups) EXPECT_EQ(weftShardGroupDestroy(g), weftSuccess);
}

template <typename F>
void OnRanks(F body) {
  std::vector<weftComm_t> comms(kWorld);
  ASSERT_EQ(weftCommInitInProcess(comms.data(), kWorld, nullptr), weftSuccess);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) ranks.emplace_back([&, rank] { body(comms[rank], rank); });
  for (auto& t : ranks) t.join();
  for (auto c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

TEST(CApiSchedule, ZeroThreeMatchesManualStepsAndHoldsTwoGroups) {
  OnRanks([](weftComm_t comm, int rank) {
    Rank a = Build(comm, rank), b = Build(comm, rank);
    weftShardSchedule_t s = nullptr;
    ASSERT_EQ(weftShardScheduleCreate(nullptr, nullptr, &s), weftSuccess);
    for (int step = 0; step < 3; ++step) {
      ScheduledStep(a, s, PoolFull, nullptr);
      ManualStep(b);
      int len = -1, held = -1, most = -1;
      ASSERT_EQ(weftShardScheduleGetState(s, &len, &held, &most), weftSuccess);
      EXPECT_EQ(len, 4) << "the order is recorded in the first step";
      EXPECT_EQ(held, 0) << "ZeRO-3 ends a step with nothing gathered";
      EXPECT_EQ(most, step == 0 ? 1 : 2) << "step " << step << ": prefetch starts once the order is known";
    }
    ExpectSameGrads(a, b);
    weftShardMemory_t m;
    ASSERT_EQ(weftShardGroupGetMemory(a.groups[0], &m), weftSuccess);
    EXPECT_EQ(m.pool_live_bytes, 0u);
    EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
    Destroy(a);
    Destroy(b);
  });
}

// Framework-owned buffers: one malloc per acquire, checked and counted.
struct Owner {
  std::map<weftShardGroup_t, std::vector<float>*> live;
  std::vector<weftShardGroup_t> acquired;  // in order
  size_t most_live = 0;
  size_t bad_sizes = 0;
  const Rank* rank = nullptr;
};

void* Acquire(void* user, weftShardGroup_t g, size_t bytes) {
  auto* o = static_cast<Owner*>(user);
  if (o->live.count(g) != 0) return nullptr;  // the schedule must not acquire a held group twice
  size_t want = 0;
  EXPECT_EQ(weftShardGroupGetFullLayout(g, &want, nullptr, 0), weftSuccess);
  if (bytes != want * sizeof(float)) ++o->bad_sizes;
  auto* buf = new std::vector<float>(bytes / sizeof(float), -999.0f);  // poisoned
  o->live[g] = buf;
  o->acquired.push_back(g);
  o->most_live = std::max(o->most_live, o->live.size());
  return buf->data();
}

void Release(void* user, weftShardGroup_t g, void* full) {
  auto* o = static_cast<Owner*>(user);
  auto it = o->live.find(g);
  ASSERT_TRUE(it != o->live.end());
  EXPECT_EQ(full, it->second->data());
  delete it->second;
  o->live.erase(it);
}

float* OwnedFull(weftShardGroup_t g, void* user) {
  auto* o = static_cast<Owner*>(user);
  return o->live.count(g) ? o->live[g]->data() : nullptr;
}

TEST(CApiSchedule, CallerOwnedBuffersAndDeclaredOrder) {
  OnRanks([](weftComm_t comm, int rank) {
    Rank a = Build(comm, rank), b = Build(comm, rank);
    Owner owner;
    weftStream_t stream = nullptr;
    ASSERT_EQ(weftStreamCreate(&stream), weftSuccess);
    weftShardScheduleConfig_t cfg = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
    cfg.acquire = Acquire;
    cfg.release = Release;
    cfg.user = &owner;
    weftShardSchedule_t s = nullptr;
    ASSERT_EQ(weftShardScheduleCreate(stream, &cfg, &s), weftSuccess);
    ASSERT_EQ(weftShardScheduleDeclareOrder(s, a.groups.data(), static_cast<int>(a.groups.size())), weftSuccess);
    for (int step = 0; step < 2; ++step) {
      owner.acquired.clear();
      ScheduledStep(a, s, OwnedFull, &owner);
      ManualStep(b);
      EXPECT_TRUE(owner.live.empty()) << "every acquired buffer is released by the end of the step";
      // Declared order: prefetch from the first step, forward 0,1,2,3 then backward 3,2,1,0.
      const std::vector<weftShardGroup_t> want = {a.groups[0], a.groups[1], a.groups[2], a.groups[3],
                                                  a.groups[3], a.groups[2], a.groups[1], a.groups[0]};
      EXPECT_EQ(owner.acquired, want) << "step " << step;
    }
    EXPECT_EQ(owner.most_live, 2u);
    EXPECT_EQ(owner.bad_sizes, 0u);
    ExpectSameGrads(a, b);
    EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
    EXPECT_EQ(weftStreamDestroy(stream), weftSuccess);
    Destroy(a);
    Destroy(b);
  });
}

void* NoMemory(void*, weftShardGroup_t, size_t) { return nullptr; }
void NoRelease(void*, weftShardGroup_t, void*) {}

TEST(CApiSchedule, AcquireFailureIsReported) {
  OnRanks([](weftComm_t comm, int rank) {
    Rank a = Build(comm, rank);
    weftShardScheduleConfig_t cfg = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
    cfg.acquire = NoMemory;
    cfg.release = NoRelease;
    weftShardSchedule_t s = nullptr;
    ASSERT_EQ(weftShardScheduleCreate(nullptr, &cfg, &s), weftSuccess);
    ASSERT_EQ(weftShardScheduleBeginStep(s), weftSuccess);
    EXPECT_EQ(weftShardSchedulePreForward(s, a.groups[0]), weftSystemError);
    EXPECT_NE(std::string(weftGetLastError()).find("acquire returned NULL"), std::string::npos)
        << weftGetLastError();
    EXPECT_EQ(weftShardScheduleEndStep(s), weftSuccess);
    EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
    Destroy(a);
  });
}

TEST(CApiSchedule, ZeroTwoKeepsGroupsAndRegathersUpdatedShards) {
  OnRanks([](weftComm_t comm, int rank) {
    Rank a = Build(comm, rank);
    weftShardScheduleConfig_t cfg = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
    cfg.reshard_after_forward = 0;
    weftShardSchedule_t s = nullptr;
    ASSERT_EQ(weftShardScheduleCreate(nullptr, &cfg, &s), weftSuccess);
    ScheduledStep(a, s, PoolFull, nullptr);
    int held = -1;
    ASSERT_EQ(weftShardScheduleGetState(s, nullptr, &held, nullptr), weftSuccess);
    EXPECT_EQ(held, 4) << "ZeRO-2 keeps every group gathered";
    // An optimizer step on rank 0's shard of group 0 must be seen everywhere next step.
    float* master = nullptr;
    ASSERT_EQ(weftShardGroupGetBuffers(a.groups[0], &master, nullptr, nullptr), weftSuccess);
    if (rank == 0) master[0] = 42.0f;
    ASSERT_EQ(weftShardScheduleBeginStep(s), weftSuccess);
    ASSERT_EQ(weftShardSchedulePreForward(s, a.groups[0]), weftSuccess);
    EXPECT_EQ(PoolFull(a.groups[0], nullptr)[0], 42.0f);
    ASSERT_EQ(weftShardScheduleEndStep(s), weftSuccess);
    EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
    for (auto g : a.groups) EXPECT_EQ(weftShardGroupReshard(g), weftSuccess);
    Destroy(a);
  });
}

}  // namespace

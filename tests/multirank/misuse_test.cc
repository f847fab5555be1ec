// A careless caller through the C ABI, in-process ranks: calls that do not
// match across ranks, handles whose communicator is gone, schedule and
// reducer calls out of order, and a communicator destroyed with work in
// flight. Each must be an error (or, for the last, safe), never a crash, a
// hang or a silent success.
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace {

// Runs body(rank, comm) on one thread per rank of a fresh in-process world.
void OnRanks(int n, const std::function<void(int, weftComm_t)>& body, std::vector<weftComm_t>* keep = nullptr) {
  std::vector<weftComm_t> comms(n);
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.timeout_ms = 20000;  // a mismatch that hangs fails the test instead of blocking it
  ASSERT_EQ(weftCommInitInProcess(comms.data(), n, &cfg), weftSuccess) << weftGetLastError();
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) ranks.emplace_back([&, r] { body(r, comms[r]); });
  for (auto& t : ranks) t.join();
  if (keep != nullptr) {
    *keep = comms;
    return;
  }
  for (weftComm_t c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

bool Mentions(const std::string& error, const char* a, const char* b) {
  return error.find(a) != std::string::npos && error.find(b) != std::string::npos;
}

// Rank 0 calls `odd`, every other rank an all-reduce: every rank must get
// weftInvalidUsage naming both calls, and later calls are refused.
void ExpectMismatchRefused(const char* name, const std::function<weftResult_t(weftComm_t)>& odd) {
  for (int n : {2, 3}) {
    OnRanks(n, [&](int rank, weftComm_t comm) {
      std::vector<float> buf(64, 1.0f);
      const weftResult_t r = rank == 0 ? odd(comm)
                                       : weftAllReduce(buf.data(), buf.data(), buf.size(), weftFloat32, weftSum, comm,
                                                       nullptr);
      const std::string error = weftGetLastError();
      EXPECT_EQ(r, weftInvalidUsage) << "rank " << rank << " of " << n << ": " << error;
      EXPECT_TRUE(Mentions(error, name, "all_reduce")) << "rank " << rank << ": " << error;
      // The communicator is broken, as over MPI and UCX: a later call is refused.
      EXPECT_EQ(weftAllReduce(buf.data(), buf.data(), buf.size(), weftFloat32, weftSum, comm, nullptr),
                weftInvalidUsage);
      EXPECT_TRUE(Mentions(weftGetLastError(), "unusable", name)) << weftGetLastError();
    });
  }
}

TEST(Mismatch, BarrierAgainstAllReduce) {
  ExpectMismatchRefused("barrier", [](weftComm_t c) { return weftBarrier(c); });
}

TEST(Mismatch, SplitAgainstAllReduce) {
  ExpectMismatchRefused("split", [](weftComm_t c) {
    weftComm_t sub = nullptr;
    const weftResult_t r = weftCommSplit(c, 0, 0, &sub);
    if (r == weftSuccess) weftCommDestroy(sub);
    return r;
  });
}

TEST(Mismatch, SplitAgainstBarrier) {
  OnRanks(2, [&](int rank, weftComm_t comm) {
    weftComm_t sub = nullptr;
    const weftResult_t r = rank == 0 ? weftCommSplit(comm, 0, 0, &sub) : weftBarrier(comm);
    EXPECT_EQ(r, weftInvalidUsage) << weftGetLastError();
    EXPECT_TRUE(Mentions(weftGetLastError(), "split", "barrier")) << weftGetLastError();
  });
}

// Splits that match still work, keys and colours and all.
TEST(Mismatch, MatchingSplitStillWorks) {
  OnRanks(4, [&](int rank, weftComm_t comm) {
    weftComm_t sub = nullptr;
    ASSERT_EQ(weftCommSplit(comm, rank % 2, -rank, &sub), weftSuccess) << weftGetLastError();
    int size = 0, me = -1;
    ASSERT_EQ(weftCommCount(sub, &size), weftSuccess);
    ASSERT_EQ(weftCommUserRank(sub, &me), weftSuccess);
    EXPECT_EQ(size, 2);
    EXPECT_EQ(me, rank < 2 ? 1 : 0);  // key -rank: the higher old rank first
    EXPECT_EQ(weftBarrier(sub), weftSuccess);
    EXPECT_EQ(weftCommDestroy(sub), weftSuccess);
  });
}

// A reducer and a shard group outlive their communicator: every call on them
// is refused, naming the communicator, instead of using freed memory.
TEST(AfterCommDestroy, ReducerRefuses) {
  std::vector<weftComm_t> comms;
  std::vector<weftReducer_t> reducers(2);
  std::vector<std::vector<float>> grads(2, std::vector<float>(16, 1.0f));
  OnRanks(2, [&](int rank, weftComm_t comm) {
    weftTensor_t t = {grads[rank].data(), grads[rank].size(), weftFloat32};
    ASSERT_EQ(weftReducerCreate(comm, &t, 1, nullptr, &reducers[rank]), weftSuccess) << weftGetLastError();
  }, &comms);
  for (weftComm_t c : comms) ASSERT_EQ(weftCommDestroy(c), weftSuccess);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(weftReducerMarkReady(reducers[rank], 0, grads[rank].data(), nullptr), weftInvalidUsage);
    EXPECT_TRUE(Mentions(weftGetLastError(), "communicator", "destroyed")) << weftGetLastError();
    EXPECT_EQ(weftReducerFinalize(reducers[rank], nullptr), weftInvalidUsage);
    EXPECT_EQ(weftReducerSetSync(reducers[rank], 1), weftInvalidUsage);
    // Destroying it frees only what is its own.
    EXPECT_EQ(weftReducerDestroy(reducers[rank]), weftSuccess) << weftGetLastError();
  }
}

TEST(AfterCommDestroy, ShardGroupRefuses) {
  std::vector<weftComm_t> comms;
  std::vector<weftShardGroup_t> groups(2);
  weftParamDesc_t params[1] = {{"w", 2, {4, 6}}};
  OnRanks(2, [&](int rank, weftComm_t comm) {
    ASSERT_EQ(weftShardGroupCreate(comm, nullptr, params, 1, nullptr, &groups[rank]), weftSuccess)
        << weftGetLastError();
  }, &comms);
  for (weftComm_t c : comms) ASSERT_EQ(weftCommDestroy(c), weftSuccess);
  weftShardSchedule_t s = nullptr;
  ASSERT_EQ(weftShardScheduleCreate(nullptr, nullptr, &s), weftSuccess);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(weftShardGroupUnshard(groups[rank], nullptr), weftInvalidUsage);
    EXPECT_TRUE(Mentions(weftGetLastError(), "communicator", "destroyed")) << weftGetLastError();
    EXPECT_EQ(weftShardScheduleDeclareOrder(s, &groups[rank], 1), weftInvalidUsage) << weftGetLastError();
    // Destroying it frees its own memory and returns its buffers to the pool it holds.
    EXPECT_EQ(weftShardGroupDestroy(groups[rank]), weftSuccess) << weftGetLastError();
  }
  EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
}

TEST(OutOfOrder, GradUsedNeedsFindUnused) {
  OnRanks(2, [&](int, weftComm_t comm) {
    std::vector<float> g(8, 1.0f);
    weftTensor_t t = {g.data(), g.size(), weftFloat32};
    weftReducer_t red = nullptr;
    ASSERT_EQ(weftReducerCreate(comm, &t, 1, nullptr, &red), weftSuccess) << weftGetLastError();
    ASSERT_EQ(weftReducerMarkReady(red, 0, g.data(), nullptr), weftSuccess) << weftGetLastError();
    ASSERT_EQ(weftReducerFinalize(red, nullptr), weftSuccess) << weftGetLastError();
    int used = -1;
    EXPECT_EQ(weftReducerGetGradUsed(red, 0, &used), weftInvalidUsage);
    EXPECT_TRUE(Mentions(weftGetLastError(), "find_unused", "GetGradUsed")) << weftGetLastError();
    EXPECT_EQ(used, -1);
    EXPECT_EQ(weftReducerDestroy(red), weftSuccess);
  });
}

TEST(OutOfOrder, SchedulePostWithoutPre) {
  OnRanks(2, [&](int, weftComm_t comm) {
    weftParamDesc_t params[1] = {{"w", 1, {10}}};
    weftShardGroup_t a = nullptr, b = nullptr;
    ASSERT_EQ(weftShardGroupCreate(comm, nullptr, params, 1, nullptr, &a), weftSuccess) << weftGetLastError();
    ASSERT_EQ(weftShardGroupCreate(comm, nullptr, params, 1, nullptr, &b), weftSuccess) << weftGetLastError();
    std::vector<float> g(10, 1.0f);
    weftTensor_t gt = {g.data(), g.size(), weftFloat32};
    weftShardSchedule_t s = nullptr;
    ASSERT_EQ(weftShardScheduleCreate(nullptr, nullptr, &s), weftSuccess);
    ASSERT_EQ(weftShardScheduleBeginStep(s), weftSuccess) << weftGetLastError();
    EXPECT_EQ(weftShardSchedulePostForward(s, a), weftInvalidUsage);
    EXPECT_TRUE(Mentions(weftGetLastError(), "PostForward", "PreForward")) << weftGetLastError();
    ASSERT_EQ(weftShardSchedulePreForward(s, a), weftSuccess) << weftGetLastError();
    EXPECT_EQ(weftShardSchedulePostForward(s, b), weftInvalidUsage);  // another group's Pre does not count
    ASSERT_EQ(weftShardSchedulePostForward(s, a), weftSuccess) << weftGetLastError();
    EXPECT_EQ(weftShardSchedulePostForward(s, a), weftInvalidUsage);  // one Post per Pre
    EXPECT_EQ(weftShardSchedulePostBackward(s, a, &gt, 1), weftInvalidUsage);
    EXPECT_TRUE(Mentions(weftGetLastError(), "PostBackward", "PreBackward")) << weftGetLastError();
    ASSERT_EQ(weftShardSchedulePreBackward(s, a), weftSuccess) << weftGetLastError();
    ASSERT_EQ(weftShardSchedulePostBackward(s, a, &gt, 1), weftSuccess) << weftGetLastError();
    EXPECT_EQ(weftShardSchedulePostBackward(s, a, &gt, 1), weftInvalidUsage);
    ASSERT_EQ(weftShardScheduleEndStep(s), weftSuccess) << weftGetLastError();
    EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
    EXPECT_EQ(weftShardGroupDestroy(a), weftSuccess);
    EXPECT_EQ(weftShardGroupDestroy(b), weftSuccess);
  });
}

// Destroy with work still queued on host streams: it returns only once that
// work no longer touches the communicator (ThreadSanitizer and
// AddressSanitizer see the difference; without them this is a smoke test).
TEST(Destroy, WaitsForWorkInFlight) {
  constexpr int kRanks = 2, kCalls = 40;
  std::vector<std::vector<float>> bufs(kRanks, std::vector<float>(512, 1.0f));
  std::vector<weftComm_t> comms;
  std::vector<weftStream_t> streams(kRanks);
  for (auto& s : streams) ASSERT_EQ(weftStreamCreate(&s), weftSuccess);
  for (int round = 0; round < 5; ++round) {
    OnRanks(kRanks, [&](int rank, weftComm_t comm) {
      for (int i = 0; i < kCalls; ++i) {
        ASSERT_EQ(weftAllReduce(bufs[rank].data(), bufs[rank].data(), 512, weftFloat32, weftMax, comm,
                                streams[rank]), weftSuccess) << weftGetLastError();
      }
      EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
    }, &comms);
    for (auto& s : streams) EXPECT_EQ(weftStreamSynchronize(s), weftSuccess) << weftGetLastError();
  }
  for (auto& s : streams) EXPECT_EQ(weftStreamDestroy(s), weftSuccess);
  for (const auto& b : bufs) EXPECT_EQ(b[0], 1.0f);
}

}  // namespace

// Every entry point that takes a `void* stream`, on host memory, against the
// stream kinds it does not take (weft/types.h, "Streams"): a pointer that is
// not a weft host stream (as a cudaStream_t would be) where a weftStream_t or
// NULL is expected, and a weftStream_t where only NULL is. Each is refused
// with weftInvalidArgument naming `stream`, without dereferencing it, and
// changes nothing: the same call with a right stream then works.
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/weft.h"

namespace {

std::string LastError() { return weftGetLastError(); }

// One in-process rank: every collective completes on its own.
class StreamKinds : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(weftCommInitInProcess(&comm_, 1, nullptr), weftSuccess) << LastError();
    ASSERT_EQ(weftStreamCreate(&host_), weftSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(weftStreamDestroy(host_), weftSuccess);
    EXPECT_EQ(weftCommDestroy(comm_), weftSuccess);
  }

  // `call(foreign)` is refused naming the stream; `call(good)` then succeeds.
  void RefusedThenWorks(const char* what, const std::function<weftResult_t(void*)>& call, void* foreign,
                        void* good) {
    EXPECT_EQ(call(foreign), weftInvalidArgument) << what;
    const std::string err = LastError();
    EXPECT_NE(err.find("stream = "), std::string::npos) << what << ": " << err;
    EXPECT_EQ(call(good), weftSuccess) << what << ": " << LastError();
    if (good != nullptr) {
      EXPECT_EQ(weftStreamSynchronize(static_cast<weftStream_t>(good)), weftSuccess) << what;
    }
  }

  weftComm_t comm_ = nullptr;
  weftStream_t host_ = nullptr;
  int not_a_stream_ = 0;  // what a cudaStream_t is to weft: a pointer it did not make
};

TEST_F(StreamKinds, CollectivesTakeNullOrAHostStream) {
  std::vector<float> a(8, 1.0f), b(8, 0.0f);
  const size_t counts[1] = {8}, displs[1] = {0};
  const std::vector<std::pair<const char*, std::function<weftResult_t(void*)>>> calls = {
      {"weftAllReduce", [&](void* s) { return weftAllReduce(a.data(), b.data(), 8, weftFloat32, weftSum, comm_, s); }},
      {"weftReduceScatter",
       [&](void* s) { return weftReduceScatter(a.data(), b.data(), 8, weftFloat32, weftSum, comm_, s); }},
      {"weftAllGather", [&](void* s) { return weftAllGather(a.data(), b.data(), 8, weftFloat32, comm_, s); }},
      {"weftBroadcast", [&](void* s) { return weftBroadcast(a.data(), b.data(), 8, weftFloat32, 0, comm_, s); }},
      {"weftReduce", [&](void* s) { return weftReduce(a.data(), b.data(), 8, weftFloat32, weftMax, 0, comm_, s); }},
      {"weftGather", [&](void* s) { return weftGather(a.data(), b.data(), 8, weftFloat32, 0, comm_, s); }},
      {"weftScatter", [&](void* s) { return weftScatter(a.data(), b.data(), 8, weftFloat32, 0, comm_, s); }},
      {"weftAllToAll", [&](void* s) { return weftAllToAll(a.data(), b.data(), 8, weftFloat32, comm_, s); }},
      {"weftAllToAllv",
       [&](void* s) {
         return weftAllToAllv(a.data(), counts, displs, b.data(), counts, displs, weftFloat32, comm_, s);
       }},
  };
  for (const auto& [name, call] : calls) {
    b.assign(8, -1.0f);
    RefusedThenWorks(name, call, &not_a_stream_, nullptr);
    EXPECT_EQ(b[7], 1.0f) << name;
    b.assign(8, -1.0f);
    RefusedThenWorks(name, call, &not_a_stream_, host_);
    EXPECT_EQ(b[7], 1.0f) << name;
  }
  // A send to itself, then its receive: each refused once first.
  RefusedThenWorks("weftSend", [&](void* s) { return weftSend(a.data(), 8, weftFloat32, 0, comm_, s); },
                   &not_a_stream_, nullptr);
  b.assign(8, -1.0f);
  RefusedThenWorks("weftRecv", [&](void* s) { return weftRecv(b.data(), 8, weftFloat32, 0, comm_, s); },
                   &not_a_stream_, nullptr);
  EXPECT_EQ(b[0], 1.0f);
  RefusedThenWorks("weftSendTagged",
                   [&](void* s) { return weftSendTagged(a.data(), 8, weftFloat32, 0, 9, comm_, s); }, &not_a_stream_,
                   nullptr);
  b.assign(8, -1.0f);
  RefusedThenWorks("weftRecvTagged",
                   [&](void* s) { return weftRecvTagged(b.data(), 8, weftFloat32, 0, 9, comm_, s); }, &not_a_stream_,
                   nullptr);
  EXPECT_EQ(b[0], 1.0f);
  RefusedThenWorks("weftSend", [&](void* s) { return weftSend(a.data(), 8, weftFloat32, 0, comm_, s); },
                   &not_a_stream_, nullptr);
  b.assign(8, -1.0f);
  int source = -7;
  RefusedThenWorks("weftRecvAnySource",
                   [&](void* s) { return weftRecvAnySource(b.data(), 8, weftFloat32, 0, &source, comm_, s); },
                   &not_a_stream_, nullptr);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(source, 0);
}

TEST_F(StreamKinds, KernelsAndPlansTakeNullOrAHostStream) {
  std::vector<float> a(4, 2.0f), flat(4, 0.0f), split(4, 0.0f);
  weftTensor_t t = {a.data(), 4, weftFloat32};
  weftTensor_t f = {split.data(), 4, weftFloat32};
  int found_inf = 0;
  float total = 0;
  weftKernelConfig_t host = WEFT_KERNEL_CONFIG_INITIALIZER;
  host.memory = weftMemoryHost;
  weftCopyPlan_t plan = nullptr;
  ASSERT_EQ(weftFlattenPlanCreate(&t, 1, flat.data(), weftFloat32, nullptr, &plan), weftSuccess) << LastError();
  const std::vector<std::pair<const char*, std::function<weftResult_t(void*)>>> calls = {
      {"weftFlatten", [&](void* s) { return weftFlatten(&t, 1, flat.data(), weftFloat32, nullptr, 1.0f, s); }},
      {"weftFlattenEx",
       [&](void* s) { return weftFlattenEx(&t, 1, flat.data(), weftFloat32, nullptr, 1.0f, &host, s); }},
      {"weftUnflatten", [&](void* s) { return weftUnflatten(flat.data(), weftFloat32, nullptr, &t, 1, 1.0f, 0, s); }},
      {"weftUnscaleCheckFinite", [&](void* s) { return weftUnscaleCheckFinite(&t, 1, 1.0f, &found_inf, s); }},
      {"weftL2Norm", [&](void* s) { return weftL2Norm(&t, 1, nullptr, &total, s); }},
      {"weftL2NormEx", [&](void* s) { return weftL2NormEx(&t, 1, nullptr, &total, &host, s); }},
      {"weftChunkCat", [&](void* s) { return weftChunkCat(&t, 1, 1, nullptr, flat.data(), weftFloat32, 1.0f, s); }},
      {"weftChunkSplit", [&](void* s) { return weftChunkSplit(flat.data(), weftFloat32, 1, nullptr, &f, 1, 1.0f, 0, s); }},
      {"weftCopyPlanExecute", [&](void* s) { return weftCopyPlanExecute(plan, 1.0f, s); }},
  };
  for (const auto& [name, call] : calls) {
    RefusedThenWorks(name, call, &not_a_stream_, nullptr);
    RefusedThenWorks(name, call, &not_a_stream_, host_);
  }
  EXPECT_EQ(flat, std::vector<float>(4, 2.0f));
  EXPECT_EQ(split, std::vector<float>(4, 2.0f));
  EXPECT_EQ(total * total, 16.0f);
  EXPECT_EQ(weftCopyPlanDestroy(plan), weftSuccess);
}

// The host reducer overlaps on a stream of its own: NULL only, so a weft
// host stream is refused as well as a foreign pointer.
TEST_F(StreamKinds, HostReducerTakesNullOnly) {
  std::vector<float> g(16, 3.0f);
  weftTensor_t spec = {nullptr, g.size(), weftFloat32};
  weftReducer_t red = nullptr;
  ASSERT_EQ(weftReducerCreate(comm_, &spec, 1, nullptr, &red), weftSuccess) << LastError();
  for (void* wrong : {static_cast<void*>(&not_a_stream_), static_cast<void*>(host_)}) {
    EXPECT_EQ(weftReducerMarkReady(red, 0, g.data(), wrong), weftInvalidArgument);
    EXPECT_NE(LastError().find("stream = "), std::string::npos) << LastError();
  }
  ASSERT_EQ(weftReducerMarkReady(red, 0, g.data(), nullptr), weftSuccess) << LastError();
  for (void* wrong : {static_cast<void*>(&not_a_stream_), static_cast<void*>(host_)}) {
    EXPECT_EQ(weftReducerFinalize(red, wrong), weftInvalidArgument);
    EXPECT_NE(LastError().find("stream = "), std::string::npos) << LastError();
  }
  EXPECT_EQ(weftReducerFinalize(red, nullptr), weftSuccess) << LastError();
  EXPECT_EQ(g[15], 3.0f);
  EXPECT_EQ(weftReducerDestroy(red), weftSuccess);
}

TEST_F(StreamKinds, HostShardGroupsTakeNullOrAHostStream) {
  weftParamDesc_t p = {"w", 1, {6}};
  weftShardGroup_t g = nullptr;
  ASSERT_EQ(weftShardGroupCreate(comm_, nullptr, &p, 1, nullptr, &g), weftSuccess) << LastError();
  std::vector<float> full(6, 0.0f), grad(6, 1.0f);
  weftTensor_t gt = {grad.data(), 6, weftFloat32};
  size_t numel = 0;
  ASSERT_EQ(weftShardGroupGetFullLayout(g, &numel, nullptr, 0), weftSuccess);
  std::vector<float> into(numel), flat(numel, 1.0f);
  const std::vector<std::pair<const char*, std::function<weftResult_t(void*)>>> calls = {
      {"weftShardGroupUnshardInto", [&](void* s) { return weftShardGroupUnshardInto(g, into.data(), s); }},
      {"weftShardGroupReduceGrads", [&](void* s) { return weftShardGroupReduceGrads(g, &gt, 1, s); }},
      {"weftShardGroupReduceGradsFlat",
       [&](void* s) { return weftShardGroupReduceGradsFlat(g, flat.data(), weftFloat32, s); }},
  };
  for (const auto& [name, call] : calls) {
    RefusedThenWorks(name, call, &not_a_stream_, nullptr);
    RefusedThenWorks(name, call, &not_a_stream_, host_);
  }
  EXPECT_EQ(weftShardGroupUnshard(g, &not_a_stream_), weftInvalidArgument);
  EXPECT_NE(LastError().find("stream = "), std::string::npos) << LastError();
  EXPECT_EQ(weftShardGroupUnshard(g, host_), weftSuccess) << LastError();
  EXPECT_EQ(weftStreamSynchronize(host_), weftSuccess);
  EXPECT_EQ(weftShardGroupReshard(g), weftSuccess);
  EXPECT_EQ(weftShardGroupDestroy(g), weftSuccess);
}

TEST_F(StreamKinds, ScheduleAndStreamCallsTakeAHostStream) {
  weftShardSchedule_t s = nullptr;
  EXPECT_EQ(weftShardScheduleCreate(reinterpret_cast<weftStream_t>(&not_a_stream_), nullptr, &s),
            weftInvalidArgument);
  EXPECT_NE(LastError().find("stream = "), std::string::npos) << LastError();
  EXPECT_EQ(s, nullptr);
  ASSERT_EQ(weftShardScheduleCreate(host_, nullptr, &s), weftSuccess) << LastError();
  EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
  // The CUDA twin: a weft host stream is the wrong kind in every build.
  EXPECT_EQ(weftShardScheduleCreateCuda(host_, nullptr, &s), weftInvalidArgument);
  EXPECT_NE(LastError().find("is a weft host stream"), std::string::npos) << LastError();
  weftStream_t foreign = reinterpret_cast<weftStream_t>(&not_a_stream_);
  EXPECT_EQ(weftStreamSynchronize(foreign), weftInvalidArgument);
  EXPECT_NE(LastError().find("not a live weft host stream"), std::string::npos) << LastError();
  EXPECT_EQ(weftStreamQuery(foreign), weftInvalidArgument);
  EXPECT_EQ(weftStreamDestroy(foreign), weftInvalidArgument);
  EXPECT_EQ(weftStreamSynchronize(nullptr), weftInvalidArgument);
  EXPECT_NE(LastError().find("stream is NULL"), std::string::npos) << LastError();
  EXPECT_EQ(not_a_stream_, 0);  // never written through
}

}  // namespace

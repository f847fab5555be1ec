// Shard groups and the shard schedule on CUDA memory, where that can be
// checked without a GPU: with no CUDA in the build, or no usable device
// (this machine), creating a group over a CUDA communicator fails with
// weftUnsupported naming CUDA before any collective, through the C++ API and
// the C ABI; the schedule refuses a host stream for CUDA memory and an
// unknown memory kind; a pool holding host memory refuses to serve a device.
// On a machine with a device the creation tests skip: tests/gpu/shard_gpu_test.cc
// runs the CUDA path there.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "capi/handles.h"
#include "comm/communicator.h"
#include "core/device_runtime.h"
#include "core/status.h"
#include "core/stream.h"
#include "shard/buffer_pool.h"
#include "shard/memory_ops.h"
#include "shard/schedule_streams.h"
#include "shard/shard_group.h"
#include "tests/unit/unreachable_cuda_comm.h"
#include "weft/weft.h"

namespace weft {
namespace {

const std::vector<shard::ParamSpec> kParams = {{"w", {4, 3}}, {"b", {4}}};

TEST(ShardOnCudaComm, CreateWithoutADeviceIsUnsupported) {
  if (const std::string why = CudaDeviceUsable("tests/gpu/shard_gpu_test.cc"); !why.empty()) GTEST_SKIP() << why;
  UnreachableCudaComm comm(2, "the shard group");
  shard::BufferPool pool;
  auto g = shard::ShardGroup::Create(&comm, nullptr, kParams, {}, &pool);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented) << g.status();
  EXPECT_NE(std::string(g.status().message()).find("CUDA"), std::string::npos) << g.status();
  EXPECT_EQ(pool.memory(), MemKind::kHost);  // untouched
}

TEST(ShardOnCudaComm, CreateThroughTheCAbiIsUnsupportedWithTheReason) {
  if (const std::string why = CudaDeviceUsable("tests/gpu/shard_gpu_test.cc"); !why.empty()) GTEST_SKIP() << why;
  weftComm_t comm = capi::NewHandle(std::make_unique<UnreachableCudaComm>(2, "the shard group"));
  weftParamDesc_t params[1] = {{"w", 2, {4, 3}}};
  weftShardGroup_t g = reinterpret_cast<weftShardGroup_t>(params);  // poisoned: must stay untouched
  EXPECT_EQ(weftShardGroupCreate(comm, nullptr, params, 1, nullptr, &g), weftUnsupported);
  EXPECT_EQ(g, reinterpret_cast<weftShardGroup_t>(params));
  const std::string err = weftGetLastError();
  EXPECT_NE(err.find("weftShardGroupCreate"), std::string::npos) << err;
  EXPECT_NE(err.find("CUDA"), std::string::npos) << err;
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

TEST(ShardScheduleCuda, RefusesAHostStreamAndUnknownMemory) {
  weftStream_t hs = nullptr;
  ASSERT_EQ(weftStreamCreate(&hs), weftSuccess);
  weftShardScheduleConfig_t cfg = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
  cfg.memory = weftMemoryCuda;
  weftShardSchedule_t s = nullptr;
  EXPECT_EQ(weftShardScheduleCreate(hs, &cfg, &s), weftInvalidArgument);
  std::string err = weftGetLastError();
  EXPECT_NE(err.find("stream = "), std::string::npos) << err;
  EXPECT_NE(err.find("host stream"), std::string::npos) << err;
  EXPECT_EQ(s, nullptr);
  cfg.memory = static_cast<weftMemoryKind_t>(7);
  EXPECT_EQ(weftShardScheduleCreate(nullptr, &cfg, &s), weftInvalidArgument);
  err = weftGetLastError();
  EXPECT_NE(err.find("config->memory = 7"), std::string::npos) << err;
  // Old callers, whose config ends before `memory`, get host memory.
  cfg = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
  cfg.memory = weftMemoryCuda;
  cfg.size = offsetof(weftShardScheduleConfig_t, memory);
  EXPECT_EQ(weftShardScheduleCreate(hs, &cfg, &s), weftSuccess) << weftGetLastError();
  EXPECT_EQ(weftShardScheduleDestroy(s), weftSuccess);
  EXPECT_EQ(weftStreamDestroy(hs), weftSuccess);
}

TEST(ShardScheduleCuda, DeviceStreamsWithoutADeviceAreUnsupported) {
  if (const std::string why = CudaDeviceUsable("tests/gpu/shard_gpu_test.cc"); !why.empty()) GTEST_SKIP() << why;
  auto s = shard::DeviceScheduleStreams(nullptr);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented) << s.status();
}

// Binding needs no device: the device ops are a table of runtime calls.
TEST(BufferPoolMemory, RefusesAnotherMemoryWhileHoldingBuffers) {
  auto dev = shard::DeviceMemoryOps(0);
  if (!dev.ok()) GTEST_SKIP() << "no CUDA in this build: " << dev.status();
  shard::BufferPool pool;
  auto p = pool.Get(100);
  ASSERT_TRUE(p.ok());
  absl::Status s = pool.Bind(*dev);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("host memory"), std::string::npos) << s;
  EXPECT_EQ(pool.memory(), MemKind::kHost);
  pool.Put(*p);
  s = pool.Bind(*dev);  // pooled buffers still pin it to the host
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  pool.Trim();
  EXPECT_TRUE(pool.Bind(*dev).ok());
  EXPECT_EQ(pool.memory(), MemKind::kCuda);
  EXPECT_TRUE(pool.Bind(shard::HostMemoryOps()).ok());  // empty: free to move back
}

TEST(MemoryOps, HostStreamsAreCheckedByKind) {
  HostStream hs;
  const auto host = shard::HostMemoryOps();
  EXPECT_TRUE(host->CheckStream("stream", nullptr).ok());
  EXPECT_TRUE(host->CheckStream("stream", &hs).ok());
  int not_a_stream = 0;
  absl::Status s = host->CheckStream("stream", &not_a_stream);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("stream = "), std::string::npos) << s;
  auto dev = shard::DeviceMemoryOps(0);
  if (!dev.ok()) return;
  EXPECT_TRUE((*dev)->CheckStream("stream", nullptr).ok());  // the legacy default stream
  s = (*dev)->CheckStream("stream", &hs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("cudaStream_t"), std::string::npos) << s;
}

}  // namespace
}  // namespace weft

// The reducer on a CUDA-memory communicator, where that can be checked
// without a GPU: with no CUDA in the build, or no usable device (this
// machine), creation fails with weftUnsupported and a reason naming CUDA,
// before any collective, through the C++ API and the C ABI alike. On a
// machine with a device these skip: tests/gpu/reducer_gpu_test.cc runs the
// CUDA reducer there.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "capi/handles.h"
#include "comm/communicator.h"
#include "core/device_runtime.h"
#include "core/status.h"
#include "shard/reducer.h"
#include "shard/reducer_device.h"
#include "tests/unit/unreachable_cuda_comm.h"
#include "weft/weft.h"

namespace weft {
namespace {

std::vector<shard::GradSpec> Grads() {
  return {{100, DataType::kFloat32, MemKind::kCuda, "w"}, {7, DataType::kFloat32, MemKind::kCuda, "b"}};
}

TEST(ReducerOnCudaComm, CreateWithoutADeviceIsUnsupported) {
  if (const std::string why = CudaDeviceUsable("tests/gpu/reducer_gpu_test.cc"); !why.empty()) GTEST_SKIP() << why;
  UnreachableCudaComm comm(1, "the reducer");
  absl::StatusOr<std::unique_ptr<shard::Reducer>> r = shard::Reducer::Create(&comm, Grads(), shard::ReducerOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("CUDA"), std::string::npos) << r.status();
  if (GetDeviceRuntime() == nullptr) {
    EXPECT_NE(std::string(r.status().message()).find("built with CUDA"), std::string::npos) << r.status();
  } else {  // the driver's reason, e.g. cudaErrorInsufficientDriver
    EXPECT_NE(std::string(r.status().message()).find("no usable CUDA device"), std::string::npos) << r.status();
  }
}

TEST(ReducerOnCudaComm, CreateThroughTheCAbiIsUnsupportedWithTheReason) {
  if (const std::string why = CudaDeviceUsable("tests/gpu/reducer_gpu_test.cc"); !why.empty()) GTEST_SKIP() << why;
  weftComm_t comm = capi::NewHandle(std::make_unique<UnreachableCudaComm>(1, "the reducer"));
  const weftTensor_t grads[2] = {{nullptr, 100, weftFloat32}, {nullptr, 7, weftFloat32}};
  weftReducerConfig_t cfg = WEFT_REDUCER_CONFIG_INITIALIZER;
  weftReducer_t red = reinterpret_cast<weftReducer_t>(&cfg);  // poisoned: must come back NULL
  EXPECT_EQ(weftReducerCreate(comm, grads, 2, &cfg, &red), weftUnsupported);
  EXPECT_EQ(red, nullptr);
  const std::string err = weftGetLastError();
  EXPECT_NE(err.find("weftReducerCreate"), std::string::npos) << err;
  EXPECT_NE(err.find("CUDA"), std::string::npos) << err;
  // The communicator is untouched and still usable for what does not need a device.
  int size = 0;
  EXPECT_EQ(weftCommCount(comm, &size), weftSuccess);
  EXPECT_EQ(size, 1);
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

TEST(ReducerOnCudaComm, DeviceSideWithoutADeviceIsUnsupported) {
  if (const std::string why = CudaDeviceUsable("tests/gpu/reducer_gpu_test.cc"); !why.empty()) GTEST_SKIP() << why;
  absl::StatusOr<std::unique_ptr<shard::DeviceSide>> d = shard::DeviceSide::Create(0, 3);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnimplemented) << d.status();
  EXPECT_NE(std::string(d.status().message()).find("CUDA"), std::string::npos) << d.status();
}

}  // namespace
}  // namespace weft

// Test support for "refused before communicating" on CUDA memory, without a
// GPU: a communicator that claims CUDA memory and fails the test if any
// collective is reached, and whether a CUDA device is usable here at all.
//
//   if (const std::string why = CudaDeviceUsable("tests/gpu/x_test.cc"); !why.empty()) GTEST_SKIP() << why;
//   UnreachableCudaComm comm(/*size=*/2, "the reducer");
#ifndef WEFT_TESTS_UNIT_UNREACHABLE_CUDA_COMM_H_
#define WEFT_TESTS_UNIT_UNREACHABLE_CUDA_COMM_H_

#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "core/device_runtime.h"
#include "core/status.h"

namespace weft {

class UnreachableCudaComm final : public Communicator {
 public:
  // Rank 0 of `size`; `who` is what should have refused ("the reducer").
  UnreachableCudaComm(int size, std::string who) : Communicator(0, size, Options()), who_(std::move(who)) {}
  Backend backend() const override { return Backend::kNccl; }

 protected:
  absl::Status DoAllReduce(const void*, void*, size_t, DataType, RedOp, void*) override { return Reached("all_reduce"); }
  absl::Status DoReduceScatter(const void*, void*, size_t, DataType, RedOp, void*) override {
    return Reached("reduce_scatter");
  }
  absl::Status DoAllGather(const void*, void*, size_t, DataType, void*) override { return Reached("all_gather"); }
  absl::Status DoBroadcast(const void*, void*, size_t, DataType, int, void*) override { return Reached("broadcast"); }
  absl::Status DoBarrier() override { return Reached("barrier"); }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override { return Reached("split"); }
  absl::Status DoSend(const void*, size_t, DataType, int, int, void*) override { return Reached("send"); }
  absl::Status DoRecv(void*, size_t, DataType, int, int, int*, void*) override { return Reached("recv"); }
  // As NcclComm says it: a tag is refused before any Do* is reached.
  const char* TagsUnsupported() const override { return "NCCL has no tags"; }

 private:
  static CommOptions Options() {
    CommOptions o;
    o.memory = MemKind::kCuda;
    o.timeout_ms = 1000;
    return o;
  }
  absl::Status Reached(const char* what) const {
    ADD_FAILURE() << what << " was called: " << who_ << " should have refused before communicating";
    return InternalError("%s reached", what);
  }
  const std::string who_;
};

// "" when CUDA work cannot run here (the case these tests check), else why
// they skip: `gpu_test` covers the CUDA path on such a machine.
inline std::string CudaDeviceUsable(const char* gpu_test) {
  const DeviceRuntime* rt = GetDeviceRuntime();
  if (rt == nullptr || !rt->DeviceCount().ok()) return "";
  return std::string("a CUDA device is usable here: ") + gpu_test + " covers the CUDA path";
}

}  // namespace weft

#endif  // WEFT_TESTS_UNIT_UNREACHABLE_CUDA_COMM_H_

// Shard groups on CUDA memory across processes: mpiexec -n N, one GPU per
// rank, each rank running every shard-group step (tests/gpu/shard_gpu_steps.h)
// on an NCCL communicator and, as the reference, on an MPI communicator over
// host memory, comparing the bytes. Gradients are multiples of 1/4, so the
// averages are exact in any summation order for the power-of-two worlds this
// runs with (1 and 2 ranks). With fewer GPUs than local ranks (NCCL refuses
// two ranks on one GPU) or none, every rank skips, with the reason, together.
// The gtest main is tests/mpi/main.cc (combines ranks' results, time limits).
#include <mpi.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "comm/registry.h"
#include "tests/gpu/gpu_mpi_util.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/shard_gpu_steps.h"

namespace weft {
namespace {

using gputest::Case;
using shard::LayoutKind;

class ShardMpi : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string reason = gputest::NoGpuPerRankReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    CommOptions d;
    d.memory = MemKind::kCuda;
    d.timeout_ms = 60000;
    absl::StatusOr<std::unique_ptr<Communicator>> nccl = InitWorld(Backend::kNccl, d);
    ASSERT_TRUE(nccl.ok()) << nccl.status();
    nccl_ = std::move(nccl).value();
    CommOptions h;
    h.timeout_ms = 60000;
    absl::StatusOr<std::unique_ptr<Communicator>> host = InitWorld(Backend::kMpi, h);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(host).value();
    ASSERT_EQ(host_->rank(), nccl_->rank());
    WEFT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    nccl_.reset();
    host_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  std::unique_ptr<Communicator> nccl_, host_;
  cudaStream_t stream_ = nullptr;
};

TEST_P(ShardMpi, MatchesTheHostPathOverMpi) { gputest::RunBoth(GetParam(), *host_, *nccl_, stream_, 0); }

INSTANTIATE_TEST_SUITE_P(
    Layouts, ShardMpi,
    ::testing::Values(Case{LayoutKind::kFlat, DataType::kBfloat16, DataType::kFloat32},
                      Case{LayoutKind::kFlat, DataType::kFloat32, DataType::kBfloat16},
                      Case{LayoutKind::kPerParam, DataType::kFloat16, DataType::kFloat32},
                      Case{LayoutKind::kPerParam, DataType::kFloat32, DataType::kFloat32}));

}  // namespace
}  // namespace weft

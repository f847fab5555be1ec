// The NCCL backend across processes: mpiexec -n N, one rank per GPU of the
// node. Inputs are small integers, so every float sum is exact in any order
// and results compare bit for bit with a host reference; every rank must hold
// the same bits. With fewer GPUs than local ranks (NCCL refuses two ranks on
// one GPU) or none, every rank skips, with the reason, together.
// The gtest main is tests/mpi/main.cc (combines ranks' results, time limits).
#include <mpi.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/registry.h"
#include "tests/gpu/gpu_mpi_util.h"
#include "tests/gpu/gpu_test_util.h"

namespace weft {
namespace {

// Element i of rank r's input: a small integer, exact in every type.
double Value(size_t i, int r) { return static_cast<double>(static_cast<int>((i * 7 + r * 13) % 17) - 8); }

void Store(DataType t, void* p, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(p)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBfloat16: static_cast<uint16_t*>(p)[i] = FloatToBf16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    default: break;
  }
}

class NcclMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = gputest::NoGpuPerRankReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    CommOptions o;
    o.memory = MemKind::kCuda;
    o.timeout_ms = 60000;
    absl::StatusOr<std::unique_ptr<Communicator>> c = InitWorld(Backend::kNccl, o);
    ASSERT_TRUE(c.ok()) << c.status();
    comm_ = std::move(c).value();
    WEFT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    comm_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  std::vector<unsigned char> RankInput(DataType t, size_t count, int rank) {
    std::vector<unsigned char> h(count * ElementSize(t));
    for (size_t i = 0; i < count; ++i) Store(t, h.data(), i, Value(i, rank));
    return h;
  }

  std::unique_ptr<Communicator> comm_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(NcclMpi, AllReduceSumIsExactAndIdenticalOnEveryRank) {
  const int n = comm_->size(), me = comm_->rank();
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16, DataType::kFloat64,
                     DataType::kInt32}) {
    for (size_t count : {size_t{1}, size_t{1000}, (size_t{1} << 20) + 3}) {
      const std::vector<unsigned char> in = RankInput(t, count, me);
      std::vector<unsigned char> want(in.size());
      for (size_t i = 0; i < count; ++i) {
        double s = 0;
        for (int r = 0; r < n; ++r) s += Value(i, r);
        Store(t, want.data(), i, s);
      }
      void* d = nullptr;
      WEFT_CUDA_OK(cudaMalloc(&d, in.size()));
      WEFT_CUDA_OK(cudaMemcpy(d, in.data(), in.size(), cudaMemcpyHostToDevice));
      WEFT_CUDA_OK(cudaDeviceSynchronize());  // stream_ does not wait for the legacy stream's copy
      const absl::Status s = comm_->AllReduce(d, d, count, t, RedOp::kSum, stream_);
      ASSERT_TRUE(s.ok()) << s;
      WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
      std::vector<unsigned char> got(in.size());
      WEFT_CUDA_OK(cudaMemcpy(got.data(), d, got.size(), cudaMemcpyDeviceToHost));
      (void)cudaFree(d);
      EXPECT_EQ(got, want) << Name(t) << " count " << count << " on rank " << me;
    }
  }
}

// A bfloat16 average is the exact sum (small integers) scaled by 1/N in
// float32 and rounded once, in all-reduce and reduce-scatter alike. NCCL's
// own ncclAvg multiplies each input by 1/N rounded to bfloat16 first, which
// for N = 3 (1/3 -> 0.33398) gives other bits for most elements.
TEST_F(NcclMpi, Bfloat16AverageIsTheSumScaledOnce) {
  const int n = comm_->size(), me = comm_->rank();
  const DataType t = DataType::kBfloat16;
  const size_t block = 4099;
  const std::vector<unsigned char> in = RankInput(t, block * n, me);
  std::vector<unsigned char> want(in.size());
  for (size_t i = 0; i < block * n; ++i) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += Value(i, r);
    Store(t, want.data(), i, static_cast<double>(static_cast<float>(s) * (1.0f / static_cast<float>(n))));
  }
  void* dsend = nullptr;
  void* drecv = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dsend, in.size()));
  WEFT_CUDA_OK(cudaMalloc(&drecv, in.size()));
  WEFT_CUDA_OK(cudaMemcpy(dsend, in.data(), in.size(), cudaMemcpyHostToDevice));
  WEFT_CUDA_OK(cudaDeviceSynchronize());  // stream_ does not wait for the legacy stream's copy
  ASSERT_TRUE(comm_->AllReduce(dsend, drecv, block * n, t, RedOp::kAvg, stream_).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
  std::vector<unsigned char> got(in.size());
  WEFT_CUDA_OK(cudaMemcpy(got.data(), drecv, got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want) << "all_reduce avg on rank " << me << " of " << n;

  ASSERT_TRUE(comm_->ReduceScatter(dsend, drecv, block, t, RedOp::kAvg, stream_).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
  std::vector<unsigned char> mine(block * ElementSize(t));
  WEFT_CUDA_OK(cudaMemcpy(mine.data(), drecv, mine.size(), cudaMemcpyDeviceToHost));
  const auto own = want.begin() + static_cast<std::ptrdiff_t>(me * block * ElementSize(t));
  EXPECT_EQ(mine, std::vector<unsigned char>(own, own + static_cast<std::ptrdiff_t>(mine.size())))
      << "reduce_scatter avg on rank " << me << " of " << n;
  (void)cudaFree(dsend);
  (void)cudaFree(drecv);
}

// A barrier that times out leaves its all-reduce queued on NCCL, so
// everything after it would wait behind it: the timeout must become the
// communicator's error (async_error), and destroying it must abort rather
// than flush work that never completes (a hang). Rank 0 times out while the
// others stay away; they abort theirs.
TEST_F(NcclMpi, BarrierTimeoutBecomesTheCommunicatorsError) {
  if (comm_->size() < 2) GTEST_SKIP() << "needs a peer that stays away";
  CommOptions o;
  o.memory = MemKind::kCuda;
  o.timeout_ms = 300;
  absl::StatusOr<std::unique_ptr<Communicator>> c = InitWorld(Backend::kNccl, o);
  ASSERT_TRUE(c.ok()) << c.status();
  if (comm_->rank() == 0) {
    const absl::Status st = (*c)->Barrier();
    EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
    EXPECT_EQ((*c)->async_error().code(), absl::StatusCode::kDeadlineExceeded) << (*c)->async_error();
    c->reset();  // aborts: must return
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the peers stayed away until rank 0 was done
  if (comm_->rank() != 0) {
    (*c)->Abort();
    c->reset();
  }
}

TEST_F(NcclMpi, ReduceScatterAllGatherBroadcastAndSplit) {
  const int n = comm_->size(), me = comm_->rank();
  const size_t block = 4099;
  const DataType t = DataType::kBfloat16;
  const size_t es = ElementSize(t);
  // reduce-scatter: block `me` of the sum of every rank's n blocks.
  const std::vector<unsigned char> in = RankInput(t, block * n, me);
  void* dsend = nullptr;
  void* drecv = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dsend, in.size()));
  WEFT_CUDA_OK(cudaMalloc(&drecv, in.size()));
  WEFT_CUDA_OK(cudaMemcpy(dsend, in.data(), in.size(), cudaMemcpyHostToDevice));
  WEFT_CUDA_OK(cudaDeviceSynchronize());  // stream_ does not wait for the legacy stream's copy
  ASSERT_TRUE(comm_->ReduceScatter(dsend, drecv, block, t, RedOp::kSum, stream_).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
  std::vector<unsigned char> got(block * es), want(block * es);
  for (size_t i = 0; i < block; ++i) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += Value(me * block + i, r);
    Store(t, want.data(), i, s);
  }
  WEFT_CUDA_OK(cudaMemcpy(got.data(), drecv, got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want) << "reduce_scatter on rank " << me;

  // all-gather of each rank's first block.
  ASSERT_TRUE(comm_->AllGather(dsend, drecv, block, t, stream_).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
  std::vector<unsigned char> all(block * n * es), all_want(block * n * es);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < block; ++i) Store(t, all_want.data(), r * block + i, Value(i, r));
  }
  WEFT_CUDA_OK(cudaMemcpy(all.data(), drecv, all.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(all, all_want) << "all_gather on rank " << me;

  // broadcast from the last rank.
  const int root = n - 1;
  ASSERT_TRUE(comm_->Broadcast(dsend, drecv, block, t, root, stream_).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
  const std::vector<unsigned char> root_in = RankInput(t, block, root);
  std::vector<unsigned char> b(block * es);
  WEFT_CUDA_OK(cudaMemcpy(b.data(), drecv, b.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(b, root_in) << "broadcast on rank " << me;
  (void)cudaFree(dsend);
  (void)cudaFree(drecv);

  // split into even and odd ranks.
  absl::StatusOr<std::unique_ptr<Communicator>> sub = comm_->Split(me % 2, me);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_NE(sub->get(), nullptr);
  EXPECT_EQ((*sub)->size(), (n - me % 2 + 1) / 2);
  EXPECT_EQ((*sub)->rank(), me / 2);
  EXPECT_TRUE((*sub)->Barrier().ok());
  EXPECT_TRUE(comm_->Barrier().ok());
}

}  // namespace
}  // namespace weft

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
#include "core/reduce.h"
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

// int16, which NCCL has no type for, is reduced widened to int32: every op
// must give the host backends' bits (core/reduce.h), wrapping included
// (values over the whole int16 range, so sums and products of two ranks
// wrap). Inside a group NCCL enqueues the reduction only at the group's end,
// so the narrowing (and a bfloat16 average's scaling) must wait for it.
TEST_F(NcclMpi, Int16ReductionsAreTheHostBitsInAndOutOfGroups) {
  const int n = comm_->size(), me = comm_->rank();
  const DataType t = DataType::kInt16;
  const size_t block = 1001, total = block * static_cast<size_t>(n), bytes = total * 2;
  std::vector<std::vector<int16_t>> in(static_cast<size_t>(n), std::vector<int16_t>(total));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < total; ++i) {
      in[r][i] = static_cast<int16_t>(static_cast<uint16_t>((i * 2654435761u) ^ (static_cast<uint32_t>(r) * 40503u)));
    }
  }
  auto src = [&](int q) -> const void* { return in[static_cast<size_t>(q)].data(); };
  void* dsend = nullptr;
  void* drecv = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dsend, bytes));
  WEFT_CUDA_OK(cudaMalloc(&drecv, bytes));
  WEFT_CUDA_OK(cudaMemcpy(dsend, in[me].data(), bytes, cudaMemcpyHostToDevice));
  auto result = [&](size_t count) {
    std::vector<int16_t> got(count);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(got.data(), drecv, count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemset(drecv, 0x5a, bytes), cudaSuccess);  // poison for the next call
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);         // stream_ does not wait for the legacy stream
    return got;
  };
  WEFT_CUDA_OK(cudaMemset(drecv, 0x5a, bytes));
  WEFT_CUDA_OK(cudaDeviceSynchronize());  // stream_ does not wait for the legacy stream's copies
  for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg}) {
    std::vector<int16_t> want(total);
  std::vector<int64_t> acc64(total);
    ReduceInRankOrder(t, op, n, src, total, acc64.data(), want.data());
    const std::string what = std::string(Name(op)) + " on rank " + std::to_string(me) + " of " + std::to_string(n);
    ASSERT_TRUE(comm_->AllReduce(dsend, drecv, total, t, op, stream_).ok());
    EXPECT_EQ(result(total), want) << "all_reduce " << what;
    ASSERT_TRUE(comm_->ReduceScatter(dsend, drecv, block, t, op, stream_).ok());
    EXPECT_EQ(result(block), std::vector<int16_t>(want.begin() + me * block, want.begin() + (me + 1) * block))
        << "reduce_scatter " << what;
    ASSERT_TRUE(comm_->Reduce(dsend, drecv, total, t, op, n - 1, stream_).ok());
    const std::vector<int16_t> got = result(total);
    if (me == n - 1) {
      EXPECT_EQ(got, want) << "reduce " << what;
    }
  }

  // In a group, beside a bfloat16 average (a sum, then scaled once).
  std::vector<int16_t> want(total);
  std::vector<int64_t> acc64(total);
  ReduceInRankOrder(t, RedOp::kSum, n, src, total, acc64.data(), want.data());
  const std::vector<unsigned char> bf_in = RankInput(DataType::kBfloat16, total, me);
  std::vector<unsigned char> bf_want(bf_in.size());
  for (size_t i = 0; i < total; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += Value(i, r);
    Store(DataType::kBfloat16, bf_want.data(), i, static_cast<double>(static_cast<float>(sum) * (1.0f / n)));
  }
  void* dbf = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dbf, bf_in.size()));
  WEFT_CUDA_OK(cudaMemcpy(dbf, bf_in.data(), bf_in.size(), cudaMemcpyHostToDevice));
  WEFT_CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(Communicator::GroupStart().ok());
  ASSERT_TRUE(comm_->AllReduce(dsend, drecv, total, t, RedOp::kSum, stream_).ok());
  ASSERT_TRUE(comm_->AllReduce(dbf, dbf, total, DataType::kBfloat16, RedOp::kAvg, stream_).ok());
  ASSERT_TRUE(Communicator::GroupEnd().ok());
  EXPECT_EQ(result(total), want) << "int16 all_reduce sum in a group on rank " << me;
  std::vector<unsigned char> bf_got(bf_in.size());
  WEFT_CUDA_OK(cudaMemcpy(bf_got.data(), dbf, bf_got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(bf_got, bf_want) << "bfloat16 all_reduce avg in a group on rank " << me;
  (void)cudaFree(dbf);
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

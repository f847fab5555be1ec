// Shard groups and the shard schedule on CUDA memory, against the same steps
// on host memory.
//
// One GPU cannot hold two NCCL ranks, so most tests run over a MirrorComm:
// one rank (rank 1) of a modelled world of N = 4, whose collectives pretend
// the other ranks hold what this one passes, scaled: as if rank r passed
// (r + 1) times these values, a sum is N(N+1)/2 = 10 times them and an
// average 2.5 times (multiples of 1/4 stay exact in every dtype), and an
// all-gather copies this rank's slot into every slot. The mirror is written
// once against shard/memory_ops.h and the kernels, so the same model runs on
// host memory (the shard group's host path, itself tested against real ranks
// in tests/multirank/shard_group_test.cc) and on the device: every device
// result must equal the host result bit for bit. Device outputs are poisoned
// (NaN) first. The NCCL tests run the real backend with its one rank against
// a mirror of a world of one (where the scales are 1). Each test skips with
// the reason when no device is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "comm/registry.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "core/status.h"
#include "core/stream.h"
#include "kernels/kernels.h"
#include "shard/memory_ops.h"
#include "shard/schedule.h"
#include "shard/shard_group.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/shard_gpu_steps.h"

namespace weft {
namespace {

using gputest::Bytes;
using gputest::Case;
using gputest::Dev;
using gputest::Download;
using gputest::FullValues;
using gputest::GradBytes;
using gputest::kParams;
using gputest::Ptrs;
using gputest::RunBoth;
using kernels::TensorRef;
using shard::BufferPool;
using shard::LayoutKind;
using shard::ShardGroup;
using shard::ShardGroupOptions;

constexpr int kWorld = 4;
constexpr int kRank = 1;

void SleepMs(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms))); }

// See the file comment. `delay_ms` > 0 holds each device all-gather behind
// a host function on its stream, so a caller that read the result without
// being ordered after it would see what was there before.
class MirrorComm final : public Communicator {
 public:
  MirrorComm(MemKind kind, int world, int rank, int delay_ms = 0)
      : Communicator(rank, world, Options(kind)), delay_ms_(delay_ms) {
    mem_ = kind == MemKind::kCuda ? *shard::DeviceMemoryOps(0) : shard::HostMemoryOps();
  }
  Backend backend() const override { return memory() == MemKind::kCuda ? Backend::kNccl : Backend::kInProcess; }

 protected:
  absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void* stream) override {
    return Scaled(send, recv, count, t, op, S(stream));
  }
  absl::Status DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                               void* stream) override {
    return Scaled(static_cast<const char*>(send) + rank() * recvcount * ElementSize(t), recv, recvcount, t, op,
                  S(stream));
  }
  absl::Status DoAllGather(const void* send, void* recv, size_t count, DataType t, void* stream) override {
    void* s = S(stream);
    if (memory() == MemKind::kCuda && delay_ms_ > 0) {
      const cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(s), &SleepMs,
                                               reinterpret_cast<void*>(intptr_t{delay_ms_}));
      if (e != cudaSuccess) return SystemError("mirror delay: %s", cudaGetErrorString(e));
    }
    const size_t bytes = count * ElementSize(t);
    for (int r = 0; r < size(); ++r) {
      char* slot = static_cast<char*>(recv) + r * bytes;
      if (slot != send) RETURN_IF_ERROR(mem_->Copy(slot, send, bytes, s));
    }
    return absl::OkStatus();
  }
  absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int, void* stream) override {
    if (send == recv) return absl::OkStatus();
    return mem_->Copy(recv, send, count * ElementSize(t), S(stream));
  }
  absl::Status DoBarrier() override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override { return Unsupported("not modelled"); }

 private:
  static CommOptions Options(MemKind kind) {
    CommOptions o;
    o.memory = kind;
    o.timeout_ms = 60000;
    o.cuda_device = kind == MemKind::kCuda ? 0 : -1;
    return o;
  }
  // Host collectives run to completion wherever they are issued.
  void* S(void* stream) const { return memory() == MemKind::kCuda ? stream : nullptr; }

  // recv = scale * send for sums and averages of floats; min and max (the
  // plan digests) of equal values are the values.
  absl::Status Scaled(const void* send, void* recv, size_t count, DataType t, RedOp op, void* s) {
    const float sum = static_cast<float>(size() * (size() + 1) / 2);  // ranks pass 1x..Nx
    const float scale = op == RedOp::kSum ? sum : sum / static_cast<float>(size());
    const size_t bytes = count * ElementSize(t);
    if (!IsFloating(t) || (op != RedOp::kSum && op != RedOp::kAvg)) {
      return send == recv ? absl::OkStatus() : mem_->Copy(recv, send, bytes, s);
    }
    ASSIGN_OR_RETURN(void* tmp, mem_->Alloc(bytes, s));
    absl::Status st = mem_->Copy(tmp, send, bytes, s);
    if (st.ok()) {
      st = kernels::Flatten({TensorRef{tmp, count, t}}, recv, t, nullptr, scale, s);
    }
    mem_->Free(tmp, s);
    return st;
  }

  const int delay_ms_;
  std::shared_ptr<const shard::MemoryOps> mem_;
};

class GpuStream : public ::testing::Test {
 protected:
  void SetUp() override {
    WEFT_REQUIRE_GPU();
    WEFT_CUDA_OK(cudaSetDevice(0));
    WEFT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

class ShardGpu : public GpuStream, public ::testing::WithParamInterface<Case> {};

TEST_P(ShardGpu, MatchesHostOnAModelledWorldOfFour) {
  MirrorComm host(MemKind::kHost, kWorld, kRank);
  MirrorComm dev(MemKind::kCuda, kWorld, kRank);
  RunBoth(GetParam(), host, dev, stream_, kRank);
}

// The real backend, one rank, against the host path on a world of one.
TEST_P(ShardGpu, NcclOneRank) {
  CommOptions co;
  co.memory = MemKind::kCuda;
  co.timeout_ms = 60000;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = InitWorld(Backend::kNccl, co);
  if (!comm.ok() && comm.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "no NCCL backend here: " << comm.status();
  }
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_EQ((*comm)->size(), 1);
  MirrorComm host(MemKind::kHost, 1, 0);
  RunBoth(GetParam(), host, **comm, stream_, 0);
}

// Pinned host memory, so copies from it on a stream are truly asynchronous.
class Pinned {
 public:
  explicit Pinned(const std::vector<unsigned char>& v) : bytes_(v.size()) {
    EXPECT_EQ(cudaMallocHost(&p_, bytes_ == 0 ? 1 : bytes_), cudaSuccess);
    if (bytes_ > 0) std::memcpy(p_, v.data(), bytes_);
  }
  ~Pinned() { (void)cudaFreeHost(p_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

// Three groups through two ZeRO-3 steps of the schedule on CUDA memory. The
// mirror holds each all-gather 20 ms behind a host function and the
// "framework" writes each gradient on its stream 20 ms late: a schedule
// whose caller stream did not wait for a gather would copy out the previous
// step's parameters (step 2 loads other values), and one whose comm stream
// did not wait for the caller would reduce the poison (NaN) gradients. The
// host path (Unshard, ReduceGrads, Reshard per group) is the reference.
TEST_F(GpuStream, ScheduleOrdersGathersAndReductionsByEvents) {
  MirrorComm hcomm(MemKind::kHost, kWorld, kRank);
  MirrorComm dcomm(MemKind::kCuda, kWorld, kRank, /*delay_ms=*/20);
  ShardGroupOptions o;
  o.param_dtype = DataType::kBfloat16;
  BufferPool hpool, dpool;
  std::vector<std::unique_ptr<ShardGroup>> hg, dg;
  for (int i = 0; i < 3; ++i) {
    hg.push_back(*ShardGroup::Create(&hcomm, nullptr, kParams, o, &hpool));
    auto d = ShardGroup::Create(&dcomm, nullptr, kParams, o, &dpool);
    ASSERT_TRUE(d.ok()) << d.status();
    dg.push_back(std::move(*d));
  }
  // Then again with group 0 kept gathered from its forward to its backward
  // (FSDP's root): its backward reads the forward's gather.
  for (const bool keep_root : {false, true}) {
    auto streams = shard::DeviceScheduleStreams(stream_);
    ASSERT_TRUE(streams.ok()) << streams.status();
    shard::ShardSchedule sched(std::move(*streams), shard::ScheduleOptions{true, true, {}});
    if (keep_root) {
      ASSERT_TRUE(sched.SetReshardAfterForward(dg[0].get(), false).ok());
    }
    const int most = keep_root ? 3 : 2;
    const size_t es = ElementSize(o.param_dtype);
    const size_t full_bytes = hg[0]->full_numel() * es;
    for (int step = 0; step < 2; ++step) {
      WEFT_CUDA_OK(cudaStreamSynchronize(stream_));  // the blocking loads come after the last step's reads
      for (int i = 0; i < 3; ++i) {
        const auto full = FullValues(100 * step + i);
        ASSERT_TRUE(hg[i]->LoadFromFull(Ptrs(full)).ok());
        ASSERT_TRUE(dg[i]->LoadFromFull(Ptrs(full)).ok());
      }
      std::vector<std::unique_ptr<Dev>> seen_fwd, seen_bwd, grads;
      std::vector<std::unique_ptr<Pinned>> sources;
      ASSERT_TRUE(sched.BeginStep().ok());
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(sched.PreForward(dg[i].get()).ok());
        seen_fwd.push_back(std::make_unique<Dev>(full_bytes));
        WEFT_CUDA_OK(cudaMemcpyAsync(seen_fwd.back()->get(), sched.full(dg[i].get()), full_bytes,
                                     cudaMemcpyDeviceToDevice, stream_));  // the "forward"
        ASSERT_TRUE(sched.PostForward(dg[i].get()).ok());
        EXPECT_LE(sched.gathered(), most);
      }
      if (keep_root) {
        EXPECT_TRUE(dg[0]->unsharded()) << "kept after its forward";
      }
      for (int i = 2; i >= 0; --i) {
        ASSERT_TRUE(sched.PreBackward(dg[i].get()).ok());
        seen_bwd.push_back(std::make_unique<Dev>(full_bytes));
        WEFT_CUDA_OK(cudaMemcpyAsync(seen_bwd.back()->get(), sched.full(dg[i].get()), full_bytes,
                                     cudaMemcpyDeviceToDevice, stream_));
        std::vector<TensorRef> hrefs, drefs;
        std::vector<std::vector<unsigned char>> hgrads;
        WEFT_CUDA_OK(cudaLaunchHostFunc(stream_, &SleepMs, reinterpret_cast<void*>(intptr_t{20})));
        for (size_t p = 0; p < kParams.size(); ++p) {
          const size_t n = hg[i]->layout().numel[p];
          hgrads.push_back(GradBytes(p, n, o.param_dtype, 10 * step + i));
          sources.push_back(std::make_unique<Pinned>(hgrads.back()));
          grads.push_back(std::make_unique<Dev>(hgrads.back().size()));  // NaN until the late copy
          WEFT_CUDA_OK(cudaMemcpyAsync(grads.back()->get(), sources.back()->get(), hgrads.back().size(),
                                       cudaMemcpyHostToDevice, stream_));
          hrefs.push_back({hgrads.back().data(), n, o.param_dtype});
          drefs.push_back({grads.back()->get(), n, o.param_dtype});
        }
        ASSERT_TRUE(sched.PostBackward(dg[i].get(), drefs).ok());
        ASSERT_TRUE(hg[i]->ReduceGrads(hrefs, nullptr).ok());
      }
      ASSERT_TRUE(sched.EndStep().ok());
      EXPECT_LE(sched.max_gathered(), most);
      EXPECT_EQ(sched.gathered(), 0);
      EXPECT_EQ(dpool.stats().live_bytes, 0u);
      WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(hg[i]->Unshard(nullptr).ok());
        const auto want = Bytes(*hg[i]->FullParam(0), full_bytes);
        EXPECT_EQ(Download(seen_fwd[i]->get(), full_bytes), want) << "step " << step << " forward of group " << i;
        EXPECT_EQ(Download(seen_bwd[2 - i]->get(), full_bytes), want) << "step " << step << " backward of group " << i;
        ASSERT_TRUE(hg[i]->Reshard().ok());
        const size_t sb = hg[i]->grads().size() * sizeof(float);
        EXPECT_EQ(Download(dg[i]->grads().data(), sb), Bytes(hg[i]->grads().data(), sb))
            << "step " << step << " group " << i << (keep_root ? ", group 0 kept" : "");
      }
    }
  }
}

// The host does not wait for a CUDA step's work at EndStep, so an error a
// communicator reported asynchronously (NCCL's watchdog) is what it returns.
TEST_F(GpuStream, EndStepSurfacesTheCommunicatorsAsyncError) {
  MirrorComm dcomm(MemKind::kCuda, kWorld, kRank);
  BufferPool dpool;
  auto d = ShardGroup::Create(&dcomm, nullptr, kParams, {}, &dpool);
  ASSERT_TRUE(d.ok()) << d.status();
  auto streams = shard::DeviceScheduleStreams(stream_);
  ASSERT_TRUE(streams.ok()) << streams.status();
  shard::ShardSchedule sched(std::move(*streams), shard::ScheduleOptions{true, true, {}});
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(sched.BeginStep().ok());
    ASSERT_TRUE(sched.PreForward(d->get()).ok());
    ASSERT_TRUE(sched.PostForward(d->get()).ok());
    if (step == 1) dcomm.RecordAsyncError(absl::UnavailableError("peer 3 went away"));
    const absl::Status s = sched.EndStep();
    if (step == 0) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      EXPECT_NE(s.message().find("peer 3 went away"), std::string::npos) << s;
    }
  }
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
}

// What a CUDA group refuses: host streams, host gradients, and a host schedule.
TEST_F(GpuStream, RefusesHostStreamsAndHostMemory) {
  MirrorComm dcomm(MemKind::kCuda, kWorld, kRank);
  MirrorComm hcomm(MemKind::kHost, kWorld, kRank);
  BufferPool dpool, hpool;
  auto d = ShardGroup::Create(&dcomm, nullptr, kParams, {}, &dpool);
  auto h = ShardGroup::Create(&hcomm, nullptr, kParams, {}, &hpool);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(h.ok()) << h.status();
  HostStream hs;
  absl::Status s = (*d)->Unshard(&hs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stream = "), std::string::npos) << s;
  EXPECT_NE(s.message().find("cudaStream_t"), std::string::npos) << s;
  EXPECT_FALSE((*d)->unsharded());

  std::vector<float> host_grad(64, 0.5f);  // as large as the largest parameter
  Dev dev_grad(64 * sizeof(float));
  std::vector<TensorRef> refs;
  for (size_t p = 0; p < kParams.size(); ++p) refs.push_back({host_grad.data(), (*d)->layout().numel[p], DataType::kFloat32});
  s = (*d)->ReduceGrads(refs, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("grads[0]"), std::string::npos) << s;
  for (auto& r : refs) r.data = dev_grad.get();
  s = (*h)->ReduceGrads(refs, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("grads[0]"), std::string::npos) << s;
  s = (*h)->Unshard(stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a live weft host stream"), std::string::npos) << s;

  EXPECT_EQ(shard::DeviceScheduleStreams(&hs).status().code(), absl::StatusCode::kInvalidArgument);
  shard::ShardSchedule host_sched(&hs, true);
  ASSERT_TRUE(host_sched.BeginStep().ok());
  s = host_sched.PreForward(d->get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cuda memory"), std::string::npos) << s;
  ASSERT_TRUE(host_sched.EndStep().ok());

  // A pool that holds device memory cannot serve a host group.
  auto held = dpool.Get(256, stream_);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(ShardGroup::Create(&hcomm, nullptr, kParams, {}, &dpool).status().code(),
            absl::StatusCode::kFailedPrecondition);
  dpool.PutOnStream(*held, stream_);
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ShardGpu,
    ::testing::Values(Case{LayoutKind::kFlat, DataType::kFloat32, DataType::kFloat32},
                      Case{LayoutKind::kFlat, DataType::kBfloat16, DataType::kFloat32},
                      Case{LayoutKind::kFlat, DataType::kFloat16, DataType::kBfloat16},
                      Case{LayoutKind::kPerParam, DataType::kFloat32, DataType::kFloat32},
                      Case{LayoutKind::kPerParam, DataType::kBfloat16, DataType::kBfloat16},
                      Case{LayoutKind::kPerParam, DataType::kFloat16, DataType::kFloat32}));

}  // namespace
}  // namespace weft

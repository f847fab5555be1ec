// Shard groups and the shard schedule on CUDA memory, against the same steps
// on host memory.
//
// One GPU cannot hold two NCCL ranks, so most tests run over a MirrorComm:
// one rank (rank 1) of a modelled world of 4, whose collectives pretend the
// other ranks hold what this one holds, scaled: rank r holds (r + 1) times
// this rank's gradients, so an average is 2.5x this rank's slot and a sum
// 10x (small integers times 1/4 stay exact in every dtype), and an
// all-gather copies this rank's slot into every slot. The mirror is written
// once against shard/memory_ops.h and the kernels, so the same model runs on
// host memory (the shard group's host path, itself tested against real ranks
// in tests/multirank/shard_group_test.cc) and on the device: every device
// result must equal the host result bit for bit. Device outputs are poisoned
// (NaN) first. The NCCL tests run the real backend with its one rank. Each
// test skips with the reason when no device is usable.
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

namespace weft {
namespace {

using kernels::TensorRef;
using shard::BufferPool;
using shard::LayoutKind;
using shard::ParamSpec;
using shard::ShardGroup;
using shard::ShardGroupOptions;

constexpr int kWorld = 4;
constexpr int kRank = 1;
constexpr float kSum = kWorld * (kWorld + 1) / 2;  // 10: ranks hold 1x..4x
constexpr float kAvg = kSum / kWorld;              // 2.5

const std::vector<ParamSpec> kParams = {{"w1", {7, 3}}, {"b1", {7}}, {"w2", {5, 7}}, {"scale", {}}};

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
    const size_t bytes = count * ElementSize(t);
    if (!IsFloating(t) || (op != RedOp::kSum && op != RedOp::kAvg)) {
      return send == recv ? absl::OkStatus() : mem_->Copy(recv, send, bytes, s);
    }
    ASSIGN_OR_RETURN(void* tmp, mem_->Alloc(bytes, s));
    absl::Status st = mem_->Copy(tmp, send, bytes, s);
    if (st.ok()) {
      st = kernels::Flatten({TensorRef{tmp, count, t}}, recv, t, nullptr, op == RedOp::kSum ? kSum : kAvg, s);
    }
    mem_->Free(tmp, s);
    return st;
  }

  const int delay_ms_;
  std::shared_ptr<const shard::MemoryOps> mem_;
};

// Random full parameters: small multiples of 1/8, exact in every dtype here.
std::vector<std::vector<float>> FullValues(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> v(-16, 16);
  std::vector<std::vector<float>> full;
  for (const auto& p : kParams) {
    size_t n = 1;
    for (auto d : p.shape) n *= d;
    full.emplace_back(n);
    for (auto& x : full.back()) x = static_cast<float>(v(rng) | 1) / 8;  // odd: never zero
  }
  return full;
}

std::vector<const float*> Ptrs(const std::vector<std::vector<float>>& v) {
  std::vector<const float*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

// Sets `bytes` at `p` to 0xff (NaN in every float type) and waits: the
// legacy stream's memset does not order the non-blocking streams under test.
void Poison(void* p, size_t bytes) {
  EXPECT_EQ(cudaMemset(p, 0xff, bytes), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // test setup only; the library never does this
}

// Device memory freed at scope exit, poisoned at birth (or holding `host`'s
// bytes), ready for any stream when constructed.
class Dev {
 public:
  explicit Dev(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&p_, bytes == 0 ? 1 : bytes), cudaSuccess);
    Poison(p_, bytes);
  }
  Dev(const void* host, size_t bytes) : Dev(bytes) {
    EXPECT_EQ(cudaMemcpy(p_, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~Dev() { (void)cudaFree(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void* get() const { return p_; }
  float* f() const { return static_cast<float*>(p_); }

 private:
  void* p_ = nullptr;
};

std::vector<unsigned char> Download(const void* p, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

std::vector<unsigned char> Bytes(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  return {c, c + bytes};
}

// Rank-1 gradients of parameter i in dtype t (k-th micro-batch), exact everywhere.
std::vector<unsigned char> GradBytes(size_t i, size_t n, DataType t, int k) {
  std::vector<float> f(n);
  for (size_t j = 0; j < n; ++j) f[j] = static_cast<float>((static_cast<int>(i + j + k) % 7) - 3) / 4;
  std::vector<unsigned char> out(n * ElementSize(t));
  const TensorRef src{f.data(), n, DataType::kFloat32};
  EXPECT_TRUE(kernels::Flatten({&src, 1}, out.data(), t, nullptr, 1.0f, nullptr).ok());
  return out;
}

struct Case {
  LayoutKind layout;
  DataType param_dtype;
  DataType reduce_dtype;
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

// One group through every step, host and device side by side.
void RunBoth(const Case& c, Communicator& host_comm, Communicator& dev_comm, cudaStream_t st) {
  ShardGroupOptions o;
  o.layout = c.layout;
  o.param_dtype = c.param_dtype;
  o.reduce_dtype = c.reduce_dtype;
  BufferPool hpool, dpool;
  auto h = ShardGroup::Create(&host_comm, nullptr, kParams, o, &hpool);
  auto d = ShardGroup::Create(&dev_comm, nullptr, kParams, o, &dpool);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(d.ok()) << d.status();
  ShardGroup& hg = **h;
  ShardGroup& dg = **d;
  ASSERT_EQ(dg.memory_kind(), MemKind::kCuda);
  ASSERT_EQ(dpool.memory(), MemKind::kCuda);
  const size_t shard_bytes = hg.master().size() * sizeof(float);
  const auto full = FullValues(7 + dev_comm.size());

  // Load from host tensors (a checkpoint) and from device tensors: the same master.
  ASSERT_TRUE(hg.LoadFromFull(Ptrs(full)).ok());
  ASSERT_TRUE(dg.LoadFromFull(Ptrs(full)).ok());
  EXPECT_EQ(Download(dg.master().data(), shard_bytes), Bytes(hg.master().data(), shard_bytes));
  std::vector<std::unique_ptr<Dev>> dfull;
  std::vector<const float*> dptrs;
  for (const auto& f : full) {
    dfull.push_back(std::make_unique<Dev>(f.data(), f.size() * sizeof(float)));
    dptrs.push_back(dfull.back()->f());
  }
  Poison(dg.master().data(), shard_bytes);
  ASSERT_TRUE(dg.LoadFromFull(dptrs).ok());
  EXPECT_EQ(Download(dg.master().data(), shard_bytes), Bytes(hg.master().data(), shard_bytes));

  // Unshard: full parameters in param_dtype.
  const size_t es = ElementSize(c.param_dtype);
  ASSERT_TRUE(hg.Unshard(nullptr).ok());
  ASSERT_TRUE(dg.Unshard(st).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(st));
  EXPECT_GT(dg.memory().unsharded_bytes, 0u);
  EXPECT_EQ(dg.memory().unsharded_bytes, hg.memory().unsharded_bytes);
  EXPECT_GT(dpool.stats().live_bytes, 0u);
  for (size_t i = 0; i < kParams.size(); ++i) {
    void* hp = *hg.FullParam(static_cast<int>(i));
    void* dp = *dg.FullParam(static_cast<int>(i));
    EXPECT_EQ(ClassifyPointer(dp), PointerKind::kDevice);
    EXPECT_EQ(Download(dp, full[i].size() * es), Bytes(hp, full[i].size() * es)) << "param " << i;
  }
  // Into a buffer the caller owns.
  Dev mine(dg.full_numel() * es);
  ASSERT_TRUE(dg.UnshardInto(mine.get(), st).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(st));
  for (size_t i = 0; i < kParams.size(); ++i) {
    EXPECT_EQ(Download(static_cast<char*>(mine.get()) + dg.full_offset(static_cast<int>(i)) * es,
                       full[i].size() * es),
              Bytes(*hg.FullParam(static_cast<int>(i)), full[i].size() * es))
        << "UnshardInto, param " << i;
  }

  // Two micro-batches in the param dtype accumulate into the fp32 shard.
  std::vector<std::unique_ptr<Dev>> keep;
  for (int k = 0; k < 2; ++k) {
    std::vector<std::vector<unsigned char>> hgrads;
    std::vector<TensorRef> hrefs, drefs;
    for (size_t i = 0; i < kParams.size(); ++i) {
      hgrads.push_back(GradBytes(i, full[i].size(), c.param_dtype, k));
      keep.push_back(std::make_unique<Dev>(hgrads.back().data(), hgrads.back().size()));
      hrefs.push_back({hgrads.back().data(), full[i].size(), c.param_dtype});
      drefs.push_back({keep.back()->get(), full[i].size(), c.param_dtype});
    }
    ASSERT_TRUE(hg.ReduceGrads(hrefs, nullptr).ok());
    ASSERT_TRUE(dg.ReduceGrads(drefs, st).ok());
  }
  if (c.layout == LayoutKind::kFlat) {  // gradients already laid out as the unsharded buffer
    std::vector<unsigned char> flat(hg.full_numel() * ElementSize(c.reduce_dtype), 0x7f);
    std::vector<std::vector<unsigned char>> parts;
    for (size_t i = 0; i < kParams.size(); ++i) {
      parts.push_back(GradBytes(i, full[i].size(), c.reduce_dtype, 5));
      std::memcpy(flat.data() + hg.full_offset(static_cast<int>(i)) * ElementSize(c.reduce_dtype), parts.back().data(),
                  parts.back().size());
    }
    Dev dflat(flat.data(), flat.size());  // its padding holds garbage: the group zeroes it
    ASSERT_TRUE(hg.ReduceGradsFlat(flat.data(), c.reduce_dtype, nullptr).ok());
    ASSERT_TRUE(dg.ReduceGradsFlat(dflat.get(), c.reduce_dtype, st).ok());
    WEFT_CUDA_OK(cudaStreamSynchronize(st));
  }
  WEFT_CUDA_OK(cudaStreamSynchronize(st));
  const auto hgrad = Bytes(hg.grads().data(), shard_bytes);
  EXPECT_EQ(Download(dg.grads().data(), shard_bytes), hgrad);
  bool nonzero = false;
  for (size_t k = 0; k < hg.grads().size(); ++k) nonzero |= hg.grads()[k] != 0.0f;
  EXPECT_TRUE(nonzero) << "the gradients reduced to zero: the comparison proves nothing";

  // Reshard: the unsharded bytes and the pool's live bytes back to zero.
  ASSERT_TRUE(hg.Reshard().ok());
  ASSERT_TRUE(dg.Reshard().ok());
  EXPECT_EQ(dg.memory().unsharded_bytes, 0u);
  EXPECT_EQ(dpool.stats().live_bytes, 0u);
  EXPECT_GT(dpool.stats().peak_live_bytes, 0u);
  EXPECT_EQ(dpool.stats().pooled_bytes, 0u);  // the device allocator caches, not the pool

  // Full state to host tensors and to device tensors.
  std::vector<std::vector<float>> hout, dhost;
  std::vector<float*> hptr, dhptr, ddptr;
  std::vector<std::unique_ptr<Dev>> dout;
  for (const auto& f : full) {
    hout.emplace_back(f.size(), -1.0f);
    dhost.emplace_back(f.size(), -2.0f);
    dout.push_back(std::make_unique<Dev>(f.size() * sizeof(float)));
  }
  for (size_t i = 0; i < full.size(); ++i) {
    hptr.push_back(hout[i].data());
    dhptr.push_back(dhost[i].data());
    ddptr.push_back(dout[i]->f());
  }
  ASSERT_TRUE(hg.GatherFull(-1, hptr).ok());
  ASSERT_TRUE(dg.GatherFull(-1, dhptr).ok());
  ASSERT_TRUE(dg.GatherFull(-1, ddptr).ok());
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(dhost[i], hout[i]) << "GatherFull to host, param " << i;
    EXPECT_EQ(Download(ddptr[i], full[i].size() * sizeof(float)), Bytes(hout[i].data(), full[i].size() * sizeof(float)))
        << "GatherFull to device, param " << i;
  }
  // Optimizer state shaped like the shard, on the device.
  Dev moment(hg.master().data(), shard_bytes);
  ASSERT_TRUE(dg.GatherFull(-1, dhptr, moment.f()).ok());
  for (size_t i = 0; i < full.size(); ++i) EXPECT_EQ(dhost[i], hout[i]) << "GatherFullFrom, param " << i;

  // Scatter back from host tensors and from device tensors.
  const auto other = FullValues(99);
  std::vector<std::unique_ptr<Dev>> dother;
  std::vector<const float*> doptr;
  for (const auto& f : other) {
    dother.push_back(std::make_unique<Dev>(f.data(), f.size() * sizeof(float)));
    doptr.push_back(dother.back()->f());
  }
  ASSERT_TRUE(hg.ScatterFull(0, Ptrs(other)).ok());
  ASSERT_TRUE(dg.ScatterFull(0, Ptrs(other)).ok());
  EXPECT_EQ(Download(dg.master().data(), shard_bytes), Bytes(hg.master().data(), shard_bytes));
  Poison(dg.master().data(), shard_bytes);
  ASSERT_TRUE(dg.ScatterFull(0, doptr).ok());
  EXPECT_EQ(Download(dg.master().data(), shard_bytes), Bytes(hg.master().data(), shard_bytes));
  Dev into(shard_bytes);
  ASSERT_TRUE(dg.ScatterFull(0, doptr, into.f()).ok());
  EXPECT_EQ(Download(into.get(), shard_bytes), Bytes(hg.master().data(), shard_bytes));

  ASSERT_TRUE(dg.ZeroGrads().ok());
  for (unsigned char b : Download(dg.grads().data(), shard_bytes)) ASSERT_EQ(b, 0);
  EXPECT_EQ(dpool.stats().live_bytes, 0u);
}

TEST_P(ShardGpu, MatchesHostOnAModelledWorldOfFour) {
  MirrorComm host(MemKind::kHost, kWorld, kRank);
  MirrorComm dev(MemKind::kCuda, kWorld, kRank);
  RunBoth(GetParam(), host, dev, stream_);
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
  RunBoth(GetParam(), host, **comm, stream_);
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
  auto streams = shard::DeviceScheduleStreams(stream_);
  ASSERT_TRUE(streams.ok()) << streams.status();
  shard::ShardSchedule sched(std::move(*streams), shard::ScheduleOptions{true, true, {}});
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
      EXPECT_LE(sched.gathered(), 2);
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
    EXPECT_LE(sched.max_gathered(), 2);
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
      EXPECT_EQ(Download(dg[i]->grads().data(), sb), Bytes(hg[i]->grads().data(), sb)) << "step " << step << " group " << i;
    }
  }
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

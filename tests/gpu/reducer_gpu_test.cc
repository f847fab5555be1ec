// The DDP reducer on CUDA memory (shard/reducer_device.h): results, and the
// stream ordering that makes them right without a device-wide sync.
//
// One GPU cannot hold two NCCL ranks, so most tests run the reducer over a
// MirrorComm: a communicator on CUDA memory that models N = 4 ranks where
// rank r holds (r + 1) times this rank's floating-point data (bitmaps are the
// same on every rank). A sum is then 10x this rank's data and the average
// 2.5x, so a missing or doubled 1/N, or a copy-out that never happened, shows
// in the result. Inputs are small integers, so every expected value is exact
// (compared bit for bit). The mirror delays each all-reduce on the stream
// (a host function), and can hold it behind a gate the test opens only after
// Finalize returned: a reducer that waited on the host for its comm stream
// would then fail (the gate gives up after 10 s), and one that did not order
// the caller's stream after the copy-out would let the caller read early.
// The NCCL tests run the real backend with its one rank.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "comm/registry.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/stream.h"
#include "kernels/kernels.h"
#include "shard/reducer.h"
#include "tests/gpu/gpu_test_util.h"

namespace weft {
namespace {

using shard::GradSpec;
using shard::Reducer;
using shard::ReducerOptions;

constexpr int kMirrorRanks = 4;
constexpr float kMirrorSum = kMirrorRanks * (kMirrorRanks + 1) / 2;  // 10: ranks hold 1x..4x
constexpr float kMirrorAvg = kMirrorSum / kMirrorRanks;              // 2.5

void SleepMs(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms))); }

class MirrorComm final : public Communicator {
 public:
  MirrorComm() : Communicator(0, kMirrorRanks, Options()) {}
  Backend backend() const override { return Backend::kNccl; }

  void CloseGate() { open_.store(false); }
  void OpenGate() { open_.store(true); }
  bool gate_timed_out() const { return timed_out_.load(); }
  int all_reduces() const { return all_reduces_.load(); }

 protected:
  absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void* stream) override {
    ++all_reduces_;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    RETURN_IF_ERROR(Cuda(cudaLaunchHostFunc(s, &MirrorComm::Gate, this), "gate"));
    RETURN_IF_ERROR(Cuda(cudaLaunchHostFunc(s, &SleepMs, reinterpret_cast<void*>(intptr_t{5})), "delay"));
    const size_t bytes = count * ElementSize(t);
    if (IsFloating(t) && (op == RedOp::kSum || op == RedOp::kAvg)) {
      void* tmp = nullptr;
      RETURN_IF_ERROR(Cuda(cudaMallocAsync(&tmp, bytes, s), "scratch"));
      RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(tmp, send, bytes, cudaMemcpyDeviceToDevice, s), "copy"));
      const float scale = op == RedOp::kSum ? kMirrorSum : kMirrorAvg;
      RETURN_IF_ERROR(kernels::Flatten({kernels::TensorRef{tmp, count, t}}, recv, t, nullptr, scale, stream));
      return Cuda(cudaFreeAsync(tmp, s), "free");
    }
    if (send == recv) return absl::OkStatus();  // max/min of equal bitmaps
    return Cuda(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, s), "copy");
  }
  absl::Status DoReduceScatter(const void*, void*, size_t, DataType, RedOp, void*) override {
    return Unsupported("not modelled");
  }
  absl::Status DoAllGather(const void* send, void* recv, size_t count, DataType t, void* stream) override {
    const size_t bytes = count * ElementSize(t);
    for (int r = 0; r < size(); ++r) {
      RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(static_cast<char*>(recv) + r * bytes, send, bytes,
                                           cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream)), "gather"));
    }
    return absl::OkStatus();
  }
  absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int, void* stream) override {
    if (send == recv) return absl::OkStatus();
    return Cuda(cudaMemcpyAsync(recv, send, count * ElementSize(t), cudaMemcpyDeviceToDevice,
                                static_cast<cudaStream_t>(stream)), "broadcast");
  }
  absl::Status DoBarrier() override { return absl::OkStatus(); }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override { return Unsupported("not modelled"); }

 private:
  static CommOptions Options() {
    CommOptions o;
    o.memory = MemKind::kCuda;
    o.timeout_ms = 60000;
    return o;
  }
  static absl::Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return absl::OkStatus();
    return SystemError("mirror %s: %s", what, cudaGetErrorString(e));
  }
  static void Gate(void* self) {
    auto* m = static_cast<MirrorComm*>(self);
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!m->open_.load()) {
      if (std::chrono::steady_clock::now() > limit) {
        m->timed_out_.store(true);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::atomic<bool> open_{true};
  std::atomic<bool> timed_out_{false};
  std::atomic<int> all_reduces_{0};
};

// Gradients in device memory with small-integer values, written on the
// caller's stream behind a delay, so a reducer that read them without
// waiting for that stream would see the poison (NaN) instead.
class Grads {
 public:
  Grads(const std::vector<size_t>& counts, uint64_t seed) : counts_(counts) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> v(-40, 40);
    for (size_t c : counts) {
      std::vector<float> h(c);
      for (float& x : h) x = static_cast<float>(v(rng) | 1);  // odd: never zero
      // Pinned, so the uploads are truly asynchronous: the host never waits
      // for a stream the mirror's gate may be holding.
      void* pinned = nullptr;
      EXPECT_EQ(cudaMallocHost(&pinned, std::max<size_t>(c, 1) * sizeof(float)), cudaSuccess);
      if (c > 0) std::memcpy(pinned, h.data(), c * sizeof(float));
      pinned_.push_back(pinned);
      values_.push_back(std::move(h));
      void* d = nullptr;
      EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(c, 1) * sizeof(float)), cudaSuccess);
      EXPECT_EQ(cudaMemset(d, 0xff, c * sizeof(float)), cudaSuccess);  // NaN
      dev_.push_back(d);
    }
    // The poison is set on the legacy stream, which stream_ does not wait for.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~Grads() {
    (void)cudaDeviceSynchronize();  // test teardown: nothing may still read the pinned sources
    for (void* d : dev_) (void)cudaFree(d);
    for (void* p : pinned_) (void)cudaFreeHost(p);
  }
  int size() const { return static_cast<int>(counts_.size()); }
  std::vector<GradSpec> Specs() const {
    std::vector<GradSpec> s;
    for (size_t i = 0; i < counts_.size(); ++i) s.push_back({counts_[i], DataType::kFloat32, MemKind::kCuda, ""});
    return s;
  }
  void* dev(int i) const { return dev_[i]; }
  const std::vector<float>& values(int i) const { return values_[i]; }
  // Enqueues, on `s`: a delay, then the upload of gradient i's values to `where`.
  void Produce(int i, void* where, cudaStream_t s) const {
    EXPECT_EQ(cudaLaunchHostFunc(s, &SleepMs, reinterpret_cast<void*>(intptr_t{2})), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(where, pinned_[i], counts_[i] * sizeof(float), cudaMemcpyHostToDevice, s),
              cudaSuccess);
  }
  // Gradient i as read on `s` after everything enqueued there (the host waits for `s`).
  std::vector<float> Read(int i, const void* where, cudaStream_t s) const {
    std::vector<float> out(counts_[i]);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), where, counts_[i] * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    return out;
  }

 private:
  std::vector<size_t> counts_;
  std::vector<std::vector<float>> values_;
  std::vector<void*> pinned_;
  std::vector<void*> dev_;
};

// Sizes that make several buckets under 64 KiB caps, odd lengths (unaligned
// slots), and one empty gradient.
std::vector<size_t> Counts() { return {3000, 17, 0, 5000, 1, 12000, 777, 4096, 31}; }

ReducerOptions SmallBuckets() {
  ReducerOptions o;
  o.bucket_cap_bytes = 64 << 10;
  o.first_bucket_cap_bytes = 16 << 10;
  return o;
}

std::vector<int> Shuffled(int n, uint64_t seed) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  return order;
}

void ExpectScaled(const std::vector<float>& got, const std::vector<float>& x, float factor, int g) {
  ASSERT_EQ(got.size(), x.size());
  for (size_t k = 0; k < x.size(); ++k) {
    ASSERT_EQ(got[k], x[k] * factor) << "gradient " << g << " element " << k << " of " << x.size();
  }
}

class ReducerGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    WEFT_REQUIRE_GPU();
    WEFT_CUDA_OK(cudaSetDevice(0));
    WEFT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  // One backward over `g` in `order` (view: into the slots) and Finalize on
  // stream_; with `gate`, the mirror's all-reduces are held until Finalize
  // returned. (No gate when Finalize waits for the comm stream by design:
  // the first backward's bucket rebuild, and find_unused's bitmap.)
  void Backward(MirrorComm& comm, Reducer& r, const Grads& g, const std::vector<int>& order, bool view, bool gate) {
    std::vector<void*> where(g.size());
    for (int i = 0; i < g.size(); ++i) where[i] = view ? r.GradSlot(i).value() : g.dev(i);
    BackwardAt(comm, r, g, where, order, gate);
  }
  // The same with gradient i (g's values) produced and marked at where[i].
  void BackwardAt(MirrorComm& comm, Reducer& r, const Grads& g, const std::vector<void*>& where,
                  const std::vector<int>& order, bool gate) {
    if (gate) comm.CloseGate();
    for (int i : order) {
      g.Produce(i, where[i], stream_);
      ASSERT_TRUE(r.MarkReady(i, where[i], stream_).ok());
    }
    const absl::Status st = r.Finalize(stream_);
    comm.OpenGate();  // had Finalize waited for the comm stream, it would have returned only after 10 s
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_FALSE(comm.gate_timed_out()) << "Finalize waited on the host for the reducer's stream";
  }

  cudaStream_t stream_ = nullptr;
};

TEST_F(ReducerGpu, SeparateBuffersOrderedByEvents) {
  MirrorComm comm;
  Grads g(Counts(), 1);
  auto r = Reducer::Create(&comm, g.Specs(), SmallBuckets());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_GE((*r)->num_buckets(), 3);
  for (int it = 0; it < 3; ++it) {  // the first backward rebuilds the buckets from the shuffled order
    Backward(comm, **r, g, Shuffled(g.size(), 10 + it), false, /*gate=*/it > 0);
    for (int i = 0; i < g.size(); ++i) ExpectScaled(g.Read(i, g.dev(i), stream_), g.values(i), kMirrorAvg, i);
  }
  EXPECT_EQ((*r)->layout_version(), 1);
  EXPECT_GE(comm.all_reduces(), 3 * 3);  // at least 3 buckets, each one all-reduce per backward
}

TEST_F(ReducerGpu, GradientAsBucketView) {
  MirrorComm comm;
  Grads g(Counts(), 2);
  ReducerOptions o = SmallBuckets();
  o.gradient_as_bucket_view = true;
  auto r = Reducer::Create(&comm, g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int it = 0; it < 2; ++it) {
    Backward(comm, **r, g, Shuffled(g.size(), 20 + it), true, /*gate=*/it > 0);
    for (int i = 0; i < g.size(); ++i) {
      ExpectScaled(g.Read(i, (*r)->GradSlot(i).value(), stream_), g.values(i), kMirrorAvg, i);
    }
  }
}

TEST_F(ReducerGpu, Bfloat16CompressionCastsInAndBack) {
  MirrorComm comm;
  Grads g(Counts(), 3);
  ReducerOptions o = SmallBuckets();
  o.comm_dtype = DataType::kBfloat16;  // |x| <= 40: x / 4 and 2.5x are exact in bfloat16
  o.rebuild_buckets = false;
  auto r = Reducer::Create(&comm, g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  Backward(comm, **r, g, Shuffled(g.size(), 30), false, /*gate=*/true);
  for (int i = 0; i < g.size(); ++i) ExpectScaled(g.Read(i, g.dev(i), stream_), g.values(i), kMirrorAvg, i);
}

TEST_F(ReducerGpu, FindUnusedViewKeepsSlotsUnusedEverywhere) {
  MirrorComm comm;
  Grads g(Counts(), 4);
  ReducerOptions o = SmallBuckets();
  o.gradient_as_bucket_view = true;
  o.find_unused = true;
  o.rebuild_buckets = false;
  auto r = Reducer::Create(&comm, g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  Backward(comm, **r, g, Shuffled(g.size(), 40), true, false);  // every slot now holds 2.5x
  // Second backward: gradients 0 and 5 unused (not marked: the mirror's
  // bitmap says no rank used them), 3 marked unused explicitly.
  std::vector<int> order;
  for (int i : Shuffled(g.size(), 41)) {
    if (i != 0 && i != 3 && i != 5) order.push_back(i);
  }
  ASSERT_TRUE((*r)->MarkUnused(3).ok());
  Backward(comm, **r, g, order, true, false);
  for (int i = 0; i < g.size(); ++i) {
    const bool used = i != 0 && i != 3 && i != 5;
    EXPECT_EQ((*r)->GradUsed(i).value(), used || g.values(i).empty()) << i;
    // Used: averaged again from fresh values; unused everywhere: the slot is left as it was.
    ExpectScaled(g.Read(i, (*r)->GradSlot(i).value(), stream_), g.values(i), kMirrorAvg, i);
  }
}

TEST_F(ReducerGpu, NoSyncCommunicatesNothing) {
  MirrorComm comm;
  Grads g(Counts(), 5);
  auto r = Reducer::Create(&comm, g.Specs(), SmallBuckets());
  ASSERT_TRUE(r.ok()) << r.status();
  const int before = comm.all_reduces();
  ASSERT_TRUE((*r)->SetSync(false).ok());
  for (int i = 0; i < g.size(); ++i) ASSERT_TRUE((*r)->MarkReady(i, g.dev(i), stream_).ok());
  ASSERT_TRUE((*r)->Finalize(stream_).ok());
  EXPECT_EQ(comm.all_reduces(), before);
}

TEST_F(ReducerGpu, BucketMemoryReturnedAtDestroy) {
  cudaMemPool_t pool = nullptr;
  WEFT_CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  WEFT_CUDA_OK(cudaDeviceSynchronize());
  uint64_t before = 0, during = 0, after = 0;
  WEFT_CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &before));
  {
    MirrorComm comm;
    Grads g(Counts(), 6);
    auto r = Reducer::Create(&comm, g.Specs(), SmallBuckets());
    ASSERT_TRUE(r.ok()) << r.status();
    WEFT_CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &during));
    size_t total = 0;
    for (size_t c : Counts()) total += c * sizeof(float);
    EXPECT_GE(during, before + total);
  }  // the reducer is destroyed here, and waits for its own stream
  WEFT_CUDA_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &after));
  EXPECT_EQ(after, before);
}

// In view mode the buckets are the framework's gradients: work it queued on
// its stream before Destroy (here a late copy of every view) must read them
// before their memory goes back to the pool. Without the ordering the frees
// complete at once on the idle comm stream, the allocations below on another
// stream get the same memory, and their NaN lands before the late copies.
TEST_F(ReducerGpu, DestroyInViewModeWaitsForTheCallersReads) {
  MirrorComm comm;
  Grads g(Counts(), 12);
  ReducerOptions o = SmallBuckets();
  o.gradient_as_bucket_view = true;
  o.rebuild_buckets = false;
  auto r = Reducer::Create(&comm, g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  Backward(comm, **r, g, Shuffled(g.size(), 120), true, /*gate=*/false);
  // Each bucket's extent, to ask the pool for the same sizes afterwards.
  std::vector<std::pair<uintptr_t, uintptr_t>> extent((*r)->num_buckets(), {UINTPTR_MAX, 0});
  std::vector<void*> copies(g.size(), nullptr);
  WEFT_CUDA_OK(cudaLaunchHostFunc(stream_, &SleepMs, reinterpret_cast<void*>(intptr_t{200})));
  for (int i = 0; i < g.size(); ++i) {
    const size_t bytes = g.values(i).size() * sizeof(float);
    const auto slot = reinterpret_cast<uintptr_t>((*r)->GradSlot(i).value());
    auto& e = extent[(*r)->GradBucket(i).value()];
    e = {std::min(e.first, slot), std::max(e.second, slot + bytes)};
    WEFT_CUDA_OK(cudaMalloc(&copies[i], std::max<size_t>(bytes, 1)));
    WEFT_CUDA_OK(cudaMemcpyAsync(copies[i], (*r)->GradSlot(i).value(), bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  r->reset();  // Destroy, while stream_ still sleeps before the copies
  cudaStream_t other = nullptr;
  WEFT_CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  std::vector<void*> grabbed;
  for (const auto& [lo, hi] : extent) {
    if (hi <= lo) continue;
    void* p = nullptr;
    WEFT_CUDA_OK(cudaMallocAsync(&p, hi - lo, other));
    WEFT_CUDA_OK(cudaMemsetAsync(p, 0xff, hi - lo, other));  // NaN
    grabbed.push_back(p);
  }
  WEFT_CUDA_OK(cudaStreamSynchronize(other));
  for (int i = 0; i < g.size(); ++i) ExpectScaled(g.Read(i, copies[i], stream_), g.values(i), kMirrorAvg, i);
  for (void* p : grabbed) WEFT_CUDA_OK(cudaFreeAsync(p, other));
  WEFT_CUDA_OK(cudaStreamSynchronize(other));
  WEFT_CUDA_OK(cudaStreamDestroy(other));
  for (void* c : copies) WEFT_CUDA_OK(cudaFree(c));
}

TEST_F(ReducerGpu, MarkReadyRefusesHostMemory) {
  MirrorComm comm;
  Grads g(Counts(), 7);
  auto r = Reducer::Create(&comm, g.Specs(), SmallBuckets());
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> host(Counts()[0]);
  const absl::Status st = (*r)->MarkReady(0, host.data(), stream_);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("host memory"), std::string::npos) << st;
}

// The buckets holding at least one of `grads` with elements: those with
// something to copy in and out when these gradients are separate buffers.
int BucketsOf(const Reducer& r, const std::vector<int>& grads) {
  std::vector<int> b;
  for (int i : grads) {
    if (Counts()[i] > 0) b.push_back(r.GradBucket(i).value());
  }
  std::sort(b.begin(), b.end());
  return static_cast<int>(std::unique(b.begin(), b.end()) - b.begin());
}

std::vector<int> All(int n) { return Shuffled(n, 0); }

// A bucket's copies become plans at its second launch with the same
// gradient pointers (the first runs the one-shot kernels: making a device
// plan waits for the legacy stream, not worth it for pointers seen once),
// and are reused, not remade, while the pointers stay.
TEST_F(ReducerGpu, CopyPlansReusedWhileThePointersStay) {
  MirrorComm comm;
  Grads g(Counts(), 11);
  ReducerOptions o = SmallBuckets();
  o.rebuild_buckets = false;  // a rebuild would make new buckets, without plans
  auto r = Reducer::Create(&comm, g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t all = BucketsOf(**r, All(g.size()));
  ASSERT_GE(all, 3);
  for (int it = 0; it < 5; ++it) {
    Backward(comm, **r, g, Shuffled(g.size(), 110 + it), false, /*gate=*/true);
    for (int i = 0; i < g.size(); ++i) ExpectScaled(g.Read(i, g.dev(i), stream_), g.values(i), kMirrorAvg, i);
    EXPECT_EQ((*r)->stats().copy_plans_built, it == 0 ? 0 : all) << "after backward " << it;
  }
}

// Gradients that move to fresh memory (PyTorch's set_to_none): the plans
// made for the old pointers are not run on the new ones. Before each step
// the buffers not in use are poisoned (NaN): a stale plan would read the
// poison into the sum, or write the average into the wrong buffer. The gate
// is closed in each step: a rebuild that destroyed the old plans at once
// (which waits for the whole device, the gated comm stream included) would
// hold MarkReady until the gate gave up. The second phase rebuilds more
// often than DeviceSide keeps retired plans, so it also frees them.
TEST_F(ReducerGpu, MovedGradientsRebuildPlansAndStillAverage) {
  MirrorComm comm;
  Grads g(Counts(), 12), other(Counts(), 13);  // other: only its memory is used
  ReducerOptions o = SmallBuckets();
  o.rebuild_buckets = false;  // one layout throughout: only the buffers move
  auto r = Reducer::Create(&comm, g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const int n = g.size();
  const int64_t all = BucketsOf(**r, All(n));
  // The gated steps retire 4 * all + 2 plans: fewer than DeviceSide keeps,
  // or freeing them would wait for the gated comm stream.
  ASSERT_LT(4 * all + 2, static_cast<int64_t>(shard::DeviceSide::kMaxRetired));
  // Per step, which gradients are in `other`, and the plans made by then.
  // Steps 0-2: g's buffers (made in 1, reused in 2); 3-4: all moved (one-shot
  // in 3, made in 4); 5-6: back, except gradient 5; 7-8: 5 back too (only its
  // bucket's plans are remade).
  struct Step {
    std::vector<int> moved;
    int64_t built;
  };
  std::vector<int> every = All(n);
  const std::vector<Step> steps = {{{}, 0},         {{}, all},          {{}, all},
                                   {every, all},    {every, 2 * all},   {{5}, 2 * all},
                                   {{5}, 3 * all},  {{}, 3 * all},      {{}, 3 * all + 1}};
  auto run = [&](const std::vector<int>& moved, bool gate, int seed) {
    std::vector<void*> where(n), idle(n);
    for (int i = 0; i < n; ++i) {
      const bool m = std::find(moved.begin(), moved.end(), i) != moved.end();
      where[i] = m ? other.dev(i) : g.dev(i);
      idle[i] = m ? g.dev(i) : other.dev(i);
      WEFT_CUDA_OK(cudaMemsetAsync(idle[i], 0xff, Counts()[i] * sizeof(float), stream_));
    }
    BackwardAt(comm, **r, g, where, Shuffled(n, seed), gate);
    for (int i = 0; i < n; ++i) {
      ExpectScaled(g.Read(i, where[i], stream_), g.values(i), kMirrorAvg, i);
      for (float v : g.Read(i, idle[i], stream_)) ASSERT_TRUE(std::isnan(v)) << "a stale buffer of gradient " << i;
    }
  };
  for (size_t k = 0; k < steps.size(); ++k) {
    SCOPED_TRACE(testing::Message() << "step " << k);
    run(steps[k].moved, /*gate=*/true, 120 + static_cast<int>(k));
    EXPECT_EQ((*r)->stats().copy_plans_built, steps[k].built);
  }
  // Pairs of steps alternating between the two buffer sets: a rebuild of
  // every bucket's plans each second step, past DeviceSide::kMaxRetired.
  const int64_t before = (*r)->stats().copy_plans_built;
  const int rounds = static_cast<int>(shard::DeviceSide::kMaxRetired) / 2 + 2;
  for (int k = 0; k < 2 * rounds; ++k) {
    SCOPED_TRACE(testing::Message() << "alternating step " << k);
    run((k / 2) % 2 == 0 ? every : std::vector<int>{}, /*gate=*/false, 140 + k);
  }
  EXPECT_EQ((*r)->stats().copy_plans_built, before + rounds * all);
  EXPECT_FALSE(comm.gate_timed_out());
}

// View mode with some gradients in their slots and others in buffers of
// their own (a framework that replaced a view): only the latter are copied,
// without 1/N (the all-reduce averages), and which gradients are views is
// part of the plans' key.
TEST_F(ReducerGpu, ViewsAndSeparateBuffersMixed) {
  MirrorComm comm;
  Grads g(Counts(), 14);
  ReducerOptions o = SmallBuckets();
  o.gradient_as_bucket_view = true;
  o.rebuild_buckets = false;
  auto r = Reducer::Create(&comm, g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const int n = g.size();
  std::vector<int> odd, even;
  for (int i = 0; i < n; ++i) (i % 2 == 1 ? odd : even).push_back(i);
  int64_t built = 0;
  // Steps 0-1: odd gradients separate; 2-3: even ones; 4: all views.
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE(testing::Message() << "step " << step);
    const std::vector<int>& separate = step < 2 ? odd : step < 4 ? even : std::vector<int>{};
    std::vector<void*> where(n);
    for (int i = 0; i < n; ++i) {
      const bool own = std::find(separate.begin(), separate.end(), i) != separate.end();
      where[i] = own ? g.dev(i) : (*r)->GradSlot(i).value();
    }
    BackwardAt(comm, **r, g, where, Shuffled(n, 150 + step), /*gate=*/true);
    for (int i = 0; i < n; ++i) ExpectScaled(g.Read(i, where[i], stream_), g.values(i), kMirrorAvg, i);
    if (step % 2 == 1) built += BucketsOf(**r, separate);
    EXPECT_EQ((*r)->stats().copy_plans_built, built);
  }
}

// Compression through plans: the scales are given at each run, so a plan
// made in the second backward converts and scales as the one-shot kernels
// did in the first. float16 splits 1/N as 1/sqrt(N) = 0.5 in and 0.5 out
// (x / 2 and 5x are exact in float16 for |x| <= 40); bfloat16 divides by
// 4 on the way in (exact, see above).
TEST_F(ReducerGpu, CompressedBucketsThroughPlans) {
  for (DataType t : {DataType::kBfloat16, DataType::kFloat16}) {
    SCOPED_TRACE(Name(t));
    MirrorComm comm;
    Grads g(Counts(), 15);
    ReducerOptions o = SmallBuckets();
    o.comm_dtype = t;
    o.rebuild_buckets = false;
    auto r = Reducer::Create(&comm, g.Specs(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int it = 0; it < 3; ++it) {
      Backward(comm, **r, g, Shuffled(g.size(), 160 + it), false, /*gate=*/true);
      for (int i = 0; i < g.size(); ++i) ExpectScaled(g.Read(i, g.dev(i), stream_), g.values(i), kMirrorAvg, i);
      EXPECT_EQ((*r)->stats().copy_plans_built, it == 0 ? 0 : BucketsOf(**r, All(g.size()))) << it;
    }
  }
}

// A weft host stream is no cudaStream_t: MarkReady and Finalize refuse it
// (the reducer would record and wait for events on it), and the refused
// calls change nothing.
TEST_F(ReducerGpu, RefusesWeftHostStreams) {
  MirrorComm comm;
  Grads g(Counts(), 10);
  auto r = Reducer::Create(&comm, g.Specs(), SmallBuckets());
  ASSERT_TRUE(r.ok()) << r.status();
  HostStream hs;
  absl::Status st = (*r)->MarkReady(0, g.dev(0), &hs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("weft host stream"), std::string::npos) << st;
  st = (*r)->Finalize(&hs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(std::string(st.message()).find("weft host stream"), std::string::npos) << st;
  // The backward starts afresh and completes on a CUDA stream.
  Backward(comm, **r, g, Shuffled(g.size(), 70), false, /*gate=*/false);
  for (int i = 0; i < g.size(); ++i) ExpectScaled(g.Read(i, g.dev(i), stream_), g.values(i), kMirrorAvg, i);
}

// The real NCCL backend, one rank: the average is the gradient itself, so
// the inputs are chosen to round in bfloat16 (1 + 2^-10 -> 1): the result
// shows the copy-in and copy-out ran, on the right streams.
TEST_F(ReducerGpu, NcclOneRank) {
  CommOptions co;
  co.memory = MemKind::kCuda;
  co.timeout_ms = 60000;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = InitWorld(Backend::kNccl, co);
  if (!comm.ok() && comm.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "no NCCL backend here: " << comm.status();
  }
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_EQ((*comm)->size(), 1);
  Grads g(Counts(), 8);
  for (bool view : {false, true}) {
    ReducerOptions o = SmallBuckets();
    o.gradient_as_bucket_view = view;
    auto r = Reducer::Create(comm->get(), g.Specs(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int it = 0; it < 2; ++it) {
      for (int i : Shuffled(g.size(), 50 + it)) {
        void* where = view ? (*r)->GradSlot(i).value() : g.dev(i);
        g.Produce(i, where, stream_);
        ASSERT_TRUE((*r)->MarkReady(i, where, stream_).ok());
      }
      ASSERT_TRUE((*r)->Finalize(stream_).ok());
      for (int i = 0; i < g.size(); ++i) {
        ExpectScaled(g.Read(i, view ? (*r)->GradSlot(i).value() : g.dev(i), stream_), g.values(i), 1.0f, i);
      }
    }
  }
  ReducerOptions o = SmallBuckets();
  o.comm_dtype = DataType::kBfloat16;
  auto r = Reducer::Create(comm->get(), g.Specs(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const float x = 1.0f + 1.0f / 1024;
  std::vector<float> ones(Counts()[0], x);
  WEFT_CUDA_OK(cudaMemcpyAsync(g.dev(0), ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  ASSERT_TRUE((*r)->MarkReady(0, g.dev(0), stream_).ok());
  for (int i = 1; i < g.size(); ++i) {
    g.Produce(i, g.dev(i), stream_);
    ASSERT_TRUE((*r)->MarkReady(i, g.dev(i), stream_).ok());
  }
  ASSERT_TRUE((*r)->Finalize(stream_).ok());
  const std::vector<float> got = g.Read(0, g.dev(0), stream_);
  for (float v : got) ASSERT_EQ(v, 1.0f);
}

// A reducer made in a thread whose current device is not the communicator's
// must still live on the communicator's device (its config said -1: the
// local rank's device): its stream, events and buckets next to NCCL's.
TEST_F(ReducerGpu, NcclReducerLivesOnTheCommunicatorsDevice) {
  int devices = 0;
  WEFT_CUDA_OK(cudaGetDeviceCount(&devices));
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs (a current device other than the communicator's); " << devices;
  CommOptions co;
  co.memory = MemKind::kCuda;
  co.timeout_ms = 60000;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = InitWorld(Backend::kNccl, co);
  if (!comm.ok() && comm.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << "no NCCL backend here: " << comm.status();
  }
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_EQ((*comm)->options().cuda_device, 0);  // one rank: local rank 0
  Grads g(Counts(), 9);
  std::thread([&] {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    auto r = Reducer::Create(comm->get(), g.Specs(), SmallBuckets());
    ASSERT_TRUE(r.ok()) << r.status();
    for (int i : Shuffled(g.size(), 60)) {
      g.Produce(i, g.dev(i), stream_);
      const absl::Status st = (*r)->MarkReady(i, g.dev(i), stream_);
      ASSERT_TRUE(st.ok()) << st;
    }
    const absl::Status st = (*r)->Finalize(stream_);
    ASSERT_TRUE(st.ok()) << st;
    for (int i = 0; i < g.size(); ++i) ExpectScaled(g.Read(i, g.dev(i), stream_), g.values(i), 1.0f, i);
  }).join();
}

}  // namespace
}  // namespace weft

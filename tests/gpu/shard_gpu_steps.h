// The shard-group steps the GPU suites run twice, on host memory and on
// CUDA memory, comparing the bytes (tests/gpu/shard_gpu_test.cc over a
// mirror communicator and NCCL's one rank; tests/gpu/shard_mpi_test.cc over
// MPI and NCCL, one GPU per rank), and the helpers they share.
//
//   RunBoth({LayoutKind::kFlat, DataType::kBfloat16, DataType::kFloat32}, host_comm, nccl_comm, stream, 0);
#ifndef WEFT_TESTS_GPU_SHARD_GPU_STEPS_H_
#define WEFT_TESTS_GPU_SHARD_GPU_STEPS_H_

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "kernels/kernels.h"
#include "shard/buffer_pool.h"
#include "shard/shard_group.h"
#include "tests/gpu/gpu_test_util.h"

namespace weft {
namespace gputest {

using kernels::TensorRef;
using shard::BufferPool;
using shard::LayoutKind;
using shard::ParamSpec;
using shard::ShardGroup;
using shard::ShardGroupOptions;

inline const std::vector<ParamSpec> kParams = {{"w1", {7, 3}}, {"b1", {7}}, {"w2", {5, 7}}, {"scale", {}}};

// Random full parameters: small multiples of 1/8, exact in every dtype here.
inline std::vector<std::vector<float>> FullValues(uint32_t seed) {
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

inline std::vector<const float*> Ptrs(const std::vector<std::vector<float>>& v) {
  std::vector<const float*> p;
  for (auto& x : v) p.push_back(x.data());
  return p;
}

// Sets `bytes` at `p` to 0xff (NaN in every float type) and waits: the
// legacy stream's memset does not order the non-blocking streams under test.
inline void Poison(void* p, size_t bytes) {
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

inline std::vector<unsigned char> Download(const void* p, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

inline std::vector<unsigned char> Bytes(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  return {c, c + bytes};
}

// Rank `rank`'s gradients of parameter i in dtype t (k-th micro-batch):
// multiples of 1/4 in [-3/4, 3/4], so every sum and average over a few
// ranks is exact in every dtype and in any order.
inline std::vector<unsigned char> GradBytes(size_t i, size_t n, DataType t, int k, int rank = 1) {
  std::vector<float> f(n);
  for (size_t j = 0; j < n; ++j) f[j] = static_cast<float>((static_cast<int>(i + j + k + 3 * rank) % 7) - 3) / 4;
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

// One group through every step, on `host_comm` (host memory) and `dev_comm`
// (CUDA memory, same rank and world) side by side: every device result must
// equal the host result bit for bit (device outputs poisoned first), the
// memory report and the pool's live bytes must be back to zero after reshard.
// `root` scatters the full state (a mirror communicator models no broadcast
// from another rank: pass its own rank).
inline void RunBoth(const Case& c, Communicator& host_comm, Communicator& dev_comm, cudaStream_t st, int root) {
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
      hgrads.push_back(GradBytes(i, full[i].size(), c.param_dtype, k, dev_comm.rank()));
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
      parts.push_back(GradBytes(i, full[i].size(), c.reduce_dtype, 5, dev_comm.rank()));
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
  ASSERT_TRUE(hg.ScatterFull(root, Ptrs(other)).ok());
  ASSERT_TRUE(dg.ScatterFull(root, Ptrs(other)).ok());
  EXPECT_EQ(Download(dg.master().data(), shard_bytes), Bytes(hg.master().data(), shard_bytes));
  Poison(dg.master().data(), shard_bytes);
  ASSERT_TRUE(dg.ScatterFull(root, doptr).ok());
  EXPECT_EQ(Download(dg.master().data(), shard_bytes), Bytes(hg.master().data(), shard_bytes));
  Dev into(shard_bytes);
  ASSERT_TRUE(dg.ScatterFull(root, doptr, into.f()).ok());
  EXPECT_EQ(Download(into.get(), shard_bytes), Bytes(hg.master().data(), shard_bytes));

  ASSERT_TRUE(dg.ZeroGrads().ok());
  for (unsigned char b : Download(dg.grads().data(), shard_bytes)) ASSERT_EQ(b, 0);
  EXPECT_EQ(dpool.stats().live_bytes, 0u);
}

}  // namespace gputest
}  // namespace weft

#endif  // WEFT_TESTS_GPU_SHARD_GPU_STEPS_H_

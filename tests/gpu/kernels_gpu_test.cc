// The CUDA kernels (kernels/cuda) through kernels/kernels.h on device memory,
// compared bit for bit with kernels/reference run on the same inputs on the
// host: salted random data (inf, NaN, subnormals, float16 overflow, -0.0,
// bfloat16 ties), NaN payloads, odd sizes, misaligned starts, 1 to 1300
// tensors (more than one launch's worth), every dtype pair, and a CUDA graph
// capture; and the same copies through CopyPlans (launch table in device
// memory), run after run, on several streams and in a graph. Every test skips
// with the reason when no device is usable.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/memory.h"
#include "kernels/copy_plan.h"
#include "kernels/kernels.h"
#include "kernels/reference/reference.h"
#include "tests/gpu/gpu_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace kernels {
namespace {

using gputest::DeviceBuffer;
using testing::Buffer;
using testing::FillRandom;
using testing::FirstDifference;
using testing::Hex;
using testing::kFloatTypes;
using testing::kOddSizes;
using testing::kScales;
using testing::ExpectSame;
using testing::MakeTensors;
using testing::Refs;
using testing::Total;

constexpr DataType kMathTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};

// Device copies of a list of host tensors.
struct OnDevice {
  explicit OnDevice(std::vector<Buffer>& host) {
    for (Buffer& h : host) {
      bufs.push_back(std::make_unique<DeviceBuffer>(h));
      refs.push_back(bufs.back()->ref());
    }
  }
  void Download(std::vector<Buffer>& host) {
    for (size_t i = 0; i < host.size(); ++i) bufs[i]->Download(host[i]);
  }
  void Upload(std::vector<Buffer>& host) {
    for (size_t i = 0; i < host.size(); ++i) bufs[i]->Upload(host[i]);
  }
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<TensorRef> refs;
};

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    WEFT_REQUIRE_GPU();
    WEFT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  void Sync() { WEFT_CUDA_OK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream_ = nullptr;
};

TEST_F(CudaKernels, FlattenEveryDtypePairMatchesReference) {
  std::mt19937_64 rng(101);
  const std::vector<size_t> sizes(std::begin(kOddSizes), std::end(kOddSizes));
  for (DataType st : kFloatTypes) {
    for (DataType dt : kFloatTypes) {
      for (float scale : kScales) {
        std::vector<Buffer> srcs = MakeTensors(sizes, st, false, rng);
        OnDevice d(srcs);
        Buffer got(dt, Total(sizes), 3), want(dt, Total(sizes), 3);
        got.Poison();
        want.Poison();
        DeviceBuffer dd(got);
        ASSERT_TRUE(Flatten(d.refs, dd.data(), dt, nullptr, scale, stream_).ok());
        Sync();
        dd.Download(got);
        reference::Flatten(Refs(srcs), want.data(), dt, nullptr, scale);
        ExpectSame(got, want, std::string(Name(st)) + "->" + Name(dt) + " scale " + std::to_string(scale));
      }
    }
  }
}

TEST_F(CudaKernels, FlattenManyMixedTensorsWithGapsSpansLaunches) {
  std::mt19937_64 rng(102);
  std::uniform_int_distribution<size_t> size(0, 300), gap(0, 5);
  for (int n : {1, 17, 500, 1300}) {  // 1300 needs several launches of at most 512 runs
    std::vector<size_t> sizes(n);
    for (size_t& s : sizes) s = size(rng);
    std::vector<size_t> offsets(n);
    size_t end = 0;
    for (int i = 0; i < n; ++i) {
      end += gap(rng);
      offsets[i] = end;
      end += sizes[i];
    }
    std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, true, rng);
    OnDevice d(srcs);
    for (DataType dt : kFloatTypes) {
      Buffer got(dt, end, 1), want(dt, end, 1);
      got.Poison();
      want.Poison();  // the gaps must keep the poison
      DeviceBuffer dd(got);
      ASSERT_TRUE(Flatten(d.refs, dd.data(), dt, offsets.data(), 0.5f, stream_).ok());
      Sync();
      dd.Download(got);
      reference::Flatten(Refs(srcs), want.data(), dt, offsets.data(), 0.5f);
      ExpectSame(got, want, std::to_string(n) + " tensors -> " + Name(dt));
    }
  }
}

TEST_F(CudaKernels, UnflattenEveryDtypePairWithAndWithoutAccumulation) {
  std::mt19937_64 rng(103);
  const std::vector<size_t> sizes(std::begin(kOddSizes), std::end(kOddSizes));
  for (DataType st : kFloatTypes) {
    for (DataType dt : kFloatTypes) {
      for (bool accumulate : {false, true}) {
        for (float scale : {1.0f, 0.25f}) {
          Buffer src(st, Total(sizes), 5);
          FillRandom(src, rng);
          DeviceBuffer dsrc(src);
          std::vector<Buffer> got = MakeTensors(sizes, dt, false, rng);
          for (Buffer& g : got) {
            if (!accumulate) g.Poison();
          }
          std::vector<Buffer> want = got;
          OnDevice d(got);
          ASSERT_TRUE(Unflatten(dsrc.data(), st, nullptr, d.refs, scale, accumulate, stream_).ok());
          Sync();
          d.Download(got);
          reference::Unflatten(src.data(), st, nullptr, Refs(want), scale, accumulate);
          for (size_t i = 0; i < got.size(); ++i) {
            ExpectSame(got[i], want[i], std::string(Name(st)) + "->" + Name(dt) + (accumulate ? " += " : " = ") +
                                            std::to_string(scale) + " x, tensor " + std::to_string(i));
          }
        }
      }
    }
  }
}

TEST_F(CudaKernels, ChunkCatAndSplitMatchReference) {
  std::mt19937_64 rng(104);
  std::uniform_int_distribution<size_t> size(0, 2000);
  for (int world : {1, 2, 3, 8}) {
    for (size_t ntensors : {size_t{37}, size_t{200}}) {  // 200 x 8 runs: several launches
      std::vector<size_t> sizes(ntensors);
      for (size_t& s : sizes) s = size(rng);
      sizes[5] = 65537;
      std::vector<size_t> chunks(sizes.size());
      size_t slab = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        chunks[i] = (sizes[i] + world - 1) / world + i % 3;
        slab += chunks[i];
      }
      for (const size_t* cc : {static_cast<const size_t*>(nullptr), static_cast<const size_t*>(chunks.data())}) {
        const size_t slab_len = cc != nullptr ? slab : [&] {
          size_t s = 0;
          for (size_t n : sizes) s += (n + world - 1) / world;
          return s;
        }();
        std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, true, rng);
        OnDevice d(srcs);
        Buffer got(DataType::kBfloat16, slab_len * world, 1), want(DataType::kBfloat16, slab_len * world, 1);
        got.Poison();
        want.Poison();
        DeviceBuffer dgot(got);
        ASSERT_TRUE(ChunkCat(d.refs, world, cc, dgot.data(), DataType::kBfloat16, 0.5f, stream_).ok());
        Sync();
        dgot.Download(got);
        reference::ChunkCat(Refs(srcs), world, cc, want.data(), DataType::kBfloat16, 0.5f);
        ExpectSame(got, want, "chunk_cat world " + std::to_string(world) + ", " + std::to_string(ntensors) + " tensors");

        std::vector<Buffer> back = MakeTensors(sizes, DataType::kFloat32, true, rng);
        std::vector<Buffer> back_want = back;
        OnDevice db(back);
        ASSERT_TRUE(ChunkSplit(dgot.data(), DataType::kBfloat16, world, cc, db.refs, 2.0f, true, stream_).ok());
        Sync();
        db.Download(back);
        reference::ChunkSplit(got.data(), DataType::kBfloat16, world, cc, Refs(back_want), 2.0f, true);
        for (size_t i = 0; i < back.size(); ++i) {
          ExpectSame(back[i], back_want[i], "chunk_split world " + std::to_string(world) + " tensor " + std::to_string(i));
        }
      }
    }
  }
}

// NaN payloads and signs, signalling NaNs, inf * 0 and a NaN scale: the GPU's
// own arithmetic would give its canonical NaN; the kernels must give the host's.
TEST_F(CudaKernels, NanBitsFollowTheReference) {
  const std::vector<uint32_t> bits = {0x7f800001u, 0xff800001u, 0x7fc12345u, 0xffc00000u, 0x7fbfffffu,
                                      0x7f800000u, 0xff800000u, 0x00000001u, 0x80000000u, 0x3f808000u};
  Buffer src(DataType::kFloat32, bits.size(), 0);
  std::memcpy(src.data(), bits.data(), bits.size() * 4);
  for (DataType dt : kFloatTypes) {
    for (float scale : {1.0f, 0.5f, 0.0f, std::nanf("7")}) {
      for (bool accumulate : {false, true}) {
        std::vector<Buffer> srcs;
        srcs.push_back(src);
        OnDevice d(srcs);
        Buffer got(dt, bits.size(), 0);
        std::mt19937_64 rng(105);
        FillRandom(got, rng);
        Buffer want = got;
        DeviceBuffer dgot(got);
        std::vector<TensorRef> outs = {dgot.ref()};
        ASSERT_TRUE(Unflatten(d.refs[0].data, DataType::kFloat32, nullptr, outs, scale, accumulate, stream_).ok());
        Sync();
        dgot.Download(got);
        std::vector<TensorRef> want_refs = {want.ref()};
        reference::Unflatten(src.data(), DataType::kFloat32, nullptr, want_refs, scale, accumulate);
        ExpectSame(got, want, std::string("float32 NaNs -> ") + Name(dt) + " scale " + std::to_string(scale) +
                                  (accumulate ? " accumulate" : ""));
      }
    }
  }
}

// Replaces every non-finite element by a finite one, so norms compare bit for bit.
void MakeFinite(Buffer& b) {
  for (size_t i = 0; i < b.count(); ++i) {
    char* p = static_cast<char*>(b.data()) + i * ElementSize(b.dtype());
    bool finite = true;
    switch (b.dtype()) {
      case DataType::kFloat32: finite = std::isfinite(*reinterpret_cast<float*>(p)); break;
      case DataType::kFloat16: finite = (*reinterpret_cast<uint16_t*>(p) & 0x7c00u) != 0x7c00u; break;
      case DataType::kBfloat16: finite = (*reinterpret_cast<uint16_t*>(p) & 0x7f80u) != 0x7f80u; break;
      default: break;
    }
    if (!finite) std::memset(p, 0x3c, ElementSize(b.dtype()));  // a finite bit pattern in every type
  }
}

TEST_F(CudaKernels, UnscaleFlagsOnlyNonFiniteResults) {
  std::mt19937_64 rng(106);
  for (DataType t : kMathTypes) {
    for (bool finite : {true, false}) {
      std::vector<size_t> sizes = {1, 3, 4099, 65537, 0, 7};
      std::vector<Buffer> tensors = MakeTensors(sizes, t, false, rng);
      if (finite) {
        for (Buffer& b : tensors) MakeFinite(b);
      }
      std::vector<Buffer> want = tensors;
      OnDevice d(tensors);
      int* dflag = nullptr;
      WEFT_CUDA_OK(cudaMalloc(&dflag, sizeof(int)));
      const int start = 5;  // "untouched" must mean untouched, not reset to 0
      WEFT_CUDA_OK(cudaMemcpy(dflag, &start, sizeof(int), cudaMemcpyHostToDevice));
      WEFT_CUDA_OK(cudaDeviceSynchronize());  // stream_ does not wait for the legacy stream's copy
      const float inv_scale = finite ? 0.5f : 1.0f / 65536.0f;
      ASSERT_TRUE(UnscaleCheckFinite(d.refs, inv_scale, dflag, stream_).ok());
      Sync();
      int got_flag = -1;
      WEFT_CUDA_OK(cudaMemcpy(&got_flag, dflag, sizeof(int), cudaMemcpyDeviceToHost));
      (void)cudaFree(dflag);
      d.Download(tensors);
      int want_flag = start;
      reference::UnscaleCheckFinite(Refs(want), inv_scale, &want_flag);
      EXPECT_EQ(got_flag, want_flag) << Name(t) << (finite ? " finite" : " with inf/NaN");
      EXPECT_EQ(want_flag, finite ? start : 1) << "the inputs did not test what they should";
      for (size_t i = 0; i < tensors.size(); ++i) {
        ExpectSame(tensors[i], want[i], std::string("unscale ") + Name(t) + " tensor " + std::to_string(i));
      }
    }
  }
}

void ExpectSameFloat(float got, float want, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got << ", reference NaN";  // payload unspecified for norms
  } else {
    EXPECT_EQ(FloatBits(got), FloatBits(want)) << what << ": " << got << ", reference " << want;
  }
}

TEST_F(CudaKernels, L2NormMatchesReferenceBitForBit) {
  std::mt19937_64 rng(107);
  for (bool finite : {true, false}) {
    std::vector<size_t> sizes = {0, 1, 255, 256, 257, 16384, 16385, 70 * 16384 + 3, 4099, 0, 65537};
    std::vector<Buffer> tensors;
    for (size_t i = 0; i < sizes.size(); ++i) {
      tensors.emplace_back(kMathTypes[i % 3], sizes[i], i % 5);
      FillRandom(tensors.back(), rng);
      if (finite) MakeFinite(tensors.back());
    }
    OnDevice d(tensors);
    float* dout = nullptr;
    WEFT_CUDA_OK(cudaMalloc(&dout, (sizes.size() + 1) * sizeof(float)));
    std::vector<float> want(sizes.size() + 1, -1.0f);
    reference::L2Norm(Refs(tensors), want.data(), &want.back());
    for (int run = 0; run < 3; ++run) {  // the same bits every run
      WEFT_CUDA_OK(cudaMemset(dout, 0xA5, (sizes.size() + 1) * sizeof(float)));
      WEFT_CUDA_OK(cudaDeviceSynchronize());  // the poison lands before the norm writes, not after
      ASSERT_TRUE(L2Norm(d.refs, dout, dout + sizes.size(), stream_).ok());
      Sync();
      std::vector<float> got(sizes.size() + 1);
      WEFT_CUDA_OK(cudaMemcpy(got.data(), dout, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got.size(); ++i) {
        ExpectSameFloat(got[i], want[i], (i < sizes.size() ? "norm of tensor " + std::to_string(i) : std::string("total")) +
                                             (finite ? "" : " (with inf/NaN)") + ", run " + std::to_string(run));
      }
    }
    (void)cudaFree(dout);
  }
}

TEST_F(CudaKernels, L2NormOfNothingIsZero) {
  float* dtotal = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dtotal, sizeof(float)));
  WEFT_CUDA_OK(cudaMemset(dtotal, 0xA5, sizeof(float)));
  WEFT_CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(L2Norm({}, nullptr, dtotal, stream_).ok());
  Sync();
  float total = -1.0f;
  WEFT_CUDA_OK(cudaMemcpy(&total, dtotal, sizeof(float), cudaMemcpyDeviceToHost));
  (void)cudaFree(dtotal);
  EXPECT_EQ(FloatBits(total), 0u);
}

// Flatten, unscale and the norm captured in one CUDA graph, replayed on new
// inputs written into the same buffers: nothing in them may synchronise,
// allocate outside the stream, or bake the first inputs into the graph.
TEST_F(CudaKernels, CapturedInACudaGraphAndReplayed) {
  std::mt19937_64 rng(108);
  const std::vector<size_t> sizes = {4099, 1, 65537, 300, 16384};
  std::vector<Buffer> grads = MakeTensors(sizes, DataType::kFloat32, false, rng);
  for (Buffer& g : grads) MakeFinite(g);
  OnDevice d(grads);
  Buffer bucket(DataType::kBfloat16, Total(sizes), 0);
  DeviceBuffer dbucket(bucket);
  int* dflag = nullptr;
  float* dnorm = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dflag, sizeof(int)));
  WEFT_CUDA_OK(cudaMalloc(&dnorm, (sizes.size() + 1) * sizeof(float)));
  WEFT_CUDA_OK(cudaMemset(dflag, 0, sizeof(int)));

  // Warm up outside the capture, as before any capture: the first call loads
  // the kernels' module and asks for their occupancy.
  ASSERT_TRUE(Flatten(d.refs, dbucket.data(), DataType::kBfloat16, nullptr, 0.25f, stream_).ok());
  ASSERT_TRUE(UnscaleCheckFinite(d.refs, 0.5f, dflag, stream_).ok());
  ASSERT_TRUE(L2Norm(d.refs, dnorm, dnorm + sizes.size(), stream_).ok());
  Sync();
  WEFT_CUDA_OK(cudaMemset(dflag, 0, sizeof(int)));

  cudaGraph_t graph = nullptr;
  WEFT_CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
  const bool flat = Flatten(d.refs, dbucket.data(), DataType::kBfloat16, nullptr, 0.25f, stream_).ok();
  const bool unscale = UnscaleCheckFinite(d.refs, 0.5f, dflag, stream_).ok();
  const bool norm = L2Norm(d.refs, dnorm, dnorm + sizes.size(), stream_).ok();
  WEFT_CUDA_OK(cudaStreamEndCapture(stream_, &graph));
  ASSERT_TRUE(flat && unscale && norm) << "a kernel refused to be captured";
  cudaGraphExec_t exec = nullptr;
  WEFT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  for (int replay = 0; replay < 2; ++replay) {
    for (Buffer& g : grads) {
      FillRandom(g, rng);
      MakeFinite(g);
    }
    for (size_t i = 0; i < grads.size(); ++i) d.bufs[i]->Upload(grads[i]);
    WEFT_CUDA_OK(cudaGraphLaunch(exec, stream_));
    Sync();

    Buffer want_bucket(DataType::kBfloat16, Total(sizes), 0);
    reference::Flatten(Refs(grads), want_bucket.data(), DataType::kBfloat16, nullptr, 0.25f);
    std::vector<Buffer> want = grads;
    int want_flag = 0;
    reference::UnscaleCheckFinite(Refs(want), 0.5f, &want_flag);
    std::vector<float> want_norm(sizes.size() + 1);
    reference::L2Norm(Refs(want), want_norm.data(), &want_norm.back());

    dbucket.Download(bucket);
    ExpectSame(bucket, want_bucket, "graph replay " + std::to_string(replay) + ": flatten");
    d.Download(grads);
    for (size_t i = 0; i < grads.size(); ++i) ExpectSame(grads[i], want[i], "graph replay: unscale");
    std::vector<float> got_norm(sizes.size() + 1);
    WEFT_CUDA_OK(cudaMemcpy(got_norm.data(), dnorm, got_norm.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < got_norm.size(); ++i) ExpectSameFloat(got_norm[i], want_norm[i], "graph replay: norm");
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  (void)cudaFree(dflag);
  (void)cudaFree(dnorm);
}

TEST_F(CudaKernels, PointersAreClassifiedAndMixedKindsRefused) {
  void* dev = nullptr;
  void* managed = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dev, 4096));
  WEFT_CUDA_OK(cudaMallocManaged(&managed, 4096));
  std::vector<float> host(1024, 1.0f);
  EXPECT_EQ(ClassifyPointer(dev), PointerKind::kDevice);
  EXPECT_EQ(ClassifyPointer(static_cast<char*>(dev) + 100), PointerKind::kDevice);
  EXPECT_EQ(ClassifyPointer(managed), PointerKind::kManaged);
  EXPECT_EQ(ClassifyPointer(host.data()), PointerKind::kHost);

  std::vector<TensorRef> srcs = {{host.data(), 1024, DataType::kFloat32}};
  const absl::Status s = Flatten(srcs, dev, DataType::kFloat32, nullptr, 1.0f, stream_);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("memory"), std::string::npos) << s;
  (void)cudaFree(dev);
  (void)cudaFree(managed);
}

// The C ABI on device memory: weftFlatten, a copy plan and weftL2Norm take
// device pointers and a cudaStream_t like the C++ API, and give the reference's bits.
TEST_F(CudaKernels, CAbiTakesDevicePointersAndAStream) {
  std::mt19937_64 rng(109);
  const std::vector<size_t> sizes = {4099, 3, 65537};
  std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, false, rng);
  for (Buffer& b : srcs) MakeFinite(b);
  OnDevice d(srcs);
  std::vector<weftTensor_t> ts;
  for (const TensorRef& r : d.refs) ts.push_back({r.data, r.count, weftFloat32});
  Buffer got(DataType::kFloat16, Total(sizes), 0), want(DataType::kFloat16, Total(sizes), 0);
  got.Poison();
  DeviceBuffer dgot(got);
  ASSERT_EQ(weftFlatten(ts.data(), static_cast<int>(ts.size()), dgot.data(), weftFloat16, nullptr, 0.5f, stream_),
            weftSuccess) << weftGetLastError();
  float* dtotal = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&dtotal, sizeof(float)));
  ASSERT_EQ(weftL2Norm(ts.data(), static_cast<int>(ts.size()), nullptr, dtotal, stream_), weftSuccess)
      << weftGetLastError();
  Sync();
  dgot.Download(got);
  reference::Flatten(Refs(srcs), want.data(), DataType::kFloat16, nullptr, 0.5f);
  ExpectSame(got, want, "weftFlatten");
  float total = 0, want_total = 0;
  WEFT_CUDA_OK(cudaMemcpy(&total, dtotal, sizeof(float), cudaMemcpyDeviceToHost));
  (void)cudaFree(dtotal);
  reference::L2Norm(Refs(srcs), nullptr, &want_total);
  EXPECT_EQ(FloatBits(total), FloatBits(want_total)) << total << " vs " << want_total;

  got.Poison();
  DeviceBuffer dplanned(got);
  weftCopyPlan_t plan = nullptr;
  ASSERT_EQ(weftFlattenPlanCreate(ts.data(), static_cast<int>(ts.size()), dplanned.data(), weftFloat16, nullptr,
                                  &plan),
            weftSuccess) << weftGetLastError();
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(weftCopyPlanExecute(plan, 0.5f, stream_), weftSuccess) << weftGetLastError();
  }
  ASSERT_EQ(weftCopyPlanDestroy(plan), weftSuccess) << weftGetLastError();
  Sync();
  dplanned.Download(got);
  ExpectSame(got, want, "weftCopyPlanExecute");
}

// ---------------------------------------------------------------- copy plans
// A CopyPlan on device memory builds its launch table once; each run must
// still read the buffers' current contents, take its own scale (a bit copy
// at 1, a conversion otherwise) and give the reference's bits.

// Mixed-dtype sources (four type pairs per destination type, so several
// launches per run), gaps between the tensors, 1300 tensors (more than one
// parameter batch of the one-shot path), new inputs before every run.
TEST_F(CudaKernels, FlattenPlanMatchesReferenceRunAfterRun) {
  std::mt19937_64 rng(110);
  for (int n : {1, 17, 1300}) {
    const testing::GappedCase c = testing::MakeGappedCase(n, rng);
    std::vector<Buffer> srcs = MakeTensors(c.sizes, DataType::kFloat32, /*mixed=*/true, rng);
    OnDevice d(srcs);
    for (DataType dt : kFloatTypes) {
      Buffer got(dt, c.end, 1), want(dt, c.end, 1);
      got.Poison();
      want.Poison();  // the gaps must keep the poison
      DeviceBuffer dd(got);
      absl::StatusOr<CopyPlan> plan = CopyPlan::Flatten(d.refs, dd.data(), dt, c.offsets.data());
      ASSERT_TRUE(plan.ok()) << plan.status();
      int run = 0;
      for (float scale : {1.0f, 0.125f, 1.0f}) {
        for (Buffer& b : srcs) FillRandom(b, rng);
        d.Upload(srcs);
        ASSERT_TRUE(plan->Run(scale, stream_).ok());
        Sync();
        dd.Download(got);
        reference::Flatten(Refs(srcs), want.data(), dt, c.offsets.data(), scale);
        ExpectSame(got, want, std::to_string(n) + " tensors -> " + Name(dt) + ", run " + std::to_string(run++));
      }
    }
  }
}

TEST_F(CudaKernels, UnflattenPlanAccumulatesOnEveryRun) {
  std::mt19937_64 rng(111);
  const testing::GappedCase c = testing::MakeGappedCase(1300, rng);
  for (DataType st : kFloatTypes) {
    for (bool accumulate : {true, false}) {
      Buffer src(st, c.end, 3);
      FillRandom(src, rng);
      DeviceBuffer dsrc(src);
      std::vector<Buffer> got = MakeTensors(c.sizes, DataType::kFloat32, /*mixed=*/true, rng);
      std::vector<Buffer> want = got;
      OnDevice d(got);
      absl::StatusOr<CopyPlan> plan = CopyPlan::Unflatten(dsrc.data(), st, c.offsets.data(), d.refs, accumulate);
      ASSERT_TRUE(plan.ok()) << plan.status();
      for (int run = 0; run < 3; ++run) {
        const float scale = run == 1 ? 1.0f : 0.5f;
        ASSERT_TRUE(plan->Run(scale, stream_).ok());
        Sync();
        d.Download(got);
        reference::Unflatten(src.data(), st, c.offsets.data(), Refs(want), scale, accumulate);
        for (size_t i = 0; i < got.size(); ++i) {
          ExpectSame(got[i], want[i], std::string(Name(st)) + (accumulate ? " += " : " = ") + "run " +
                                          std::to_string(run) + ", tensor " + std::to_string(i));
        }
      }
    }
  }
}

// chunk_cat's zero padding is a run without a source; chunk_split skips it.
TEST_F(CudaKernels, ChunkCatAndSplitPlansMatchReference) {
  std::mt19937_64 rng(112);
  for (int world : {1, 3, 8}) {
    const testing::ChunkCase c = testing::MakeChunkCase(world, /*explicit_chunks=*/true, rng);
    std::vector<Buffer> srcs = MakeTensors(c.sizes, DataType::kFloat32, /*mixed=*/true, rng);
    OnDevice d(srcs);
    Buffer got(DataType::kBfloat16, c.slab * world, 1), want(DataType::kBfloat16, c.slab * world, 1);
    got.Poison();
    want.Poison();
    DeviceBuffer dgot(got);
    absl::StatusOr<CopyPlan> cat = CopyPlan::ChunkCat(d.refs, world, c.chunks.data(), dgot.data(), DataType::kBfloat16);
    ASSERT_TRUE(cat.ok()) << cat.status();
    ASSERT_TRUE(cat->Run(0.5f, stream_).ok());
    Sync();
    dgot.Download(got);
    reference::ChunkCat(Refs(srcs), world, c.chunks.data(), want.data(), DataType::kBfloat16, 0.5f);
    ExpectSame(got, want, "chunk_cat plan, world " + std::to_string(world));

    std::vector<Buffer> back = MakeTensors(c.sizes, DataType::kFloat32, /*mixed=*/true, rng);
    std::vector<Buffer> back_want = back;
    OnDevice db(back);
    absl::StatusOr<CopyPlan> split =
        CopyPlan::ChunkSplit(dgot.data(), DataType::kBfloat16, world, c.chunks.data(), db.refs, /*accumulate=*/true);
    ASSERT_TRUE(split.ok()) << split.status();
    for (int run = 0; run < 2; ++run) {
      ASSERT_TRUE(split->Run(2.0f, stream_).ok());
      reference::ChunkSplit(got.data(), DataType::kBfloat16, world, c.chunks.data(), Refs(back_want), 2.0f, true);
    }
    Sync();
    db.Download(back);
    for (size_t i = 0; i < back.size(); ++i) {
      ExpectSame(back[i], back_want[i], "chunk_split plan, world " + std::to_string(world) + ", tensor " +
                                            std::to_string(i));
    }
  }
}

// One accumulating plan run on four streams in turn, each run ordered after
// the previous one by an event, with changing scales (so order shows in the
// bits), and the plan destroyed while those runs may still be queued:
// destruction must wait for every stream, not free the table under them.
// Two plans reading the same tensors also run concurrently on two streams.
TEST_F(CudaKernels, PlanRunsOnSeveralStreamsAndMayBeDestroyedWhileQueued) {
  std::mt19937_64 rng(113);
  const testing::GappedCase c = testing::MakeGappedCase(700, rng);
  Buffer src(DataType::kBfloat16, c.end, 0);
  FillRandom(src, rng);
  DeviceBuffer dsrc(src);
  std::vector<Buffer> got = MakeTensors(c.sizes, DataType::kFloat32, /*mixed=*/false, rng);
  std::vector<Buffer> want = got;
  OnDevice d(got);
  cudaStream_t streams[4] = {};
  for (cudaStream_t& s : streams) WEFT_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t done = nullptr;
  WEFT_CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  {
    absl::StatusOr<CopyPlan> plan =
        CopyPlan::Unflatten(dsrc.data(), DataType::kBfloat16, c.offsets.data(), d.refs, /*accumulate=*/true);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const float scales[] = {0.5f, 3.0f, 1.0f, 0.25f, 1.5f, 1.0f, 2.0f, 0.75f};
    for (int run = 0; run < 8; ++run) {
      cudaStream_t s = streams[run % 4];
      if (run > 0) WEFT_CUDA_OK(cudaStreamWaitEvent(s, done, 0));
      ASSERT_TRUE(plan->Run(scales[run], s).ok());
      WEFT_CUDA_OK(cudaEventRecord(done, s));
      reference::Unflatten(src.data(), DataType::kBfloat16, c.offsets.data(), Refs(want), scales[run], true);
    }
  }  // the plan goes here, its last runs possibly still queued
  for (cudaStream_t s : streams) WEFT_CUDA_OK(cudaStreamSynchronize(s));
  d.Download(got);
  for (size_t i = 0; i < got.size(); ++i) ExpectSame(got[i], want[i], "8 runs on 4 streams, tensor " + std::to_string(i));

  Buffer b16(DataType::kBfloat16, c.end, 0), b32(DataType::kFloat32, c.end, 0);
  b16.Poison();
  b32.Poison();
  Buffer want16 = b16, want32 = b32;
  DeviceBuffer d16(b16), d32(b32);
  absl::StatusOr<CopyPlan> to16 = CopyPlan::Flatten(d.refs, d16.data(), DataType::kBfloat16, c.offsets.data());
  absl::StatusOr<CopyPlan> to32 = CopyPlan::Flatten(d.refs, d32.data(), DataType::kFloat32, c.offsets.data());
  ASSERT_TRUE(to16.ok() && to32.ok()) << to16.status() << " " << to32.status();
  for (int run = 0; run < 4; ++run) {
    ASSERT_TRUE(to16->Run(0.125f, streams[0]).ok());
    ASSERT_TRUE(to32->Run(1.0f, streams[1]).ok());
  }
  for (cudaStream_t s : streams) WEFT_CUDA_OK(cudaStreamSynchronize(s));
  d16.Download(b16);
  d32.Download(b32);
  reference::Flatten(Refs(got), want16.data(), DataType::kBfloat16, c.offsets.data(), 0.125f);
  reference::Flatten(Refs(got), want32.data(), DataType::kFloat32, c.offsets.data(), 1.0f);
  ExpectSame(b16, want16, "concurrent plan on stream 0");
  ExpectSame(b32, want32, "concurrent plan on stream 1");
  (void)cudaEventDestroy(done);
  for (cudaStream_t s : streams) (void)cudaStreamDestroy(s);
}

// A plan's run captured in a CUDA graph with no run before the capture
// (creation has loaded the kernels), replayed on new inputs.
TEST_F(CudaKernels, PlanRunsCapturedInACudaGraph) {
  std::mt19937_64 rng(114);
  const std::vector<size_t> sizes = {4099, 1, 65537, 300, 16384, 0, 7};
  std::vector<Buffer> grads = MakeTensors(sizes, DataType::kFloat32, false, rng);
  OnDevice d(grads);
  Buffer bucket(DataType::kBfloat16, Total(sizes), 0);
  DeviceBuffer dbucket(bucket);
  std::vector<Buffer> acc = MakeTensors(sizes, DataType::kFloat32, false, rng);
  std::vector<Buffer> acc_want = acc;
  OnDevice dacc(acc);
  absl::StatusOr<CopyPlan> fill = CopyPlan::Flatten(d.refs, dbucket.data(), DataType::kBfloat16, nullptr);
  absl::StatusOr<CopyPlan> back =
      CopyPlan::Unflatten(dbucket.data(), DataType::kBfloat16, nullptr, dacc.refs, /*accumulate=*/true);
  ASSERT_TRUE(fill.ok() && back.ok()) << fill.status() << " " << back.status();

  cudaGraph_t graph = nullptr;
  WEFT_CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal));
  const absl::Status filled = fill->Run(0.25f, stream_);
  const absl::Status copied_back = back->Run(2.0f, stream_);
  WEFT_CUDA_OK(cudaStreamEndCapture(stream_, &graph));
  ASSERT_TRUE(filled.ok() && copied_back.ok()) << filled << " " << copied_back;
  cudaGraphExec_t exec = nullptr;
  WEFT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    for (Buffer& g : grads) FillRandom(g, rng);
    d.Upload(grads);
    WEFT_CUDA_OK(cudaGraphLaunch(exec, stream_));
    Sync();
    Buffer want_bucket(DataType::kBfloat16, Total(sizes), 0);
    reference::Flatten(Refs(grads), want_bucket.data(), DataType::kBfloat16, nullptr, 0.25f);
    reference::Unflatten(want_bucket.data(), DataType::kBfloat16, nullptr, Refs(acc_want), 2.0f, true);
    dbucket.Download(bucket);
    ExpectSame(bucket, want_bucket, "graph replay " + std::to_string(replay) + ": flatten plan");
    dacc.Download(acc);
    for (size_t i = 0; i < acc.size(); ++i) {
      ExpectSame(acc[i], acc_want[i], "graph replay " + std::to_string(replay) + ": unflatten plan, tensor " +
                                          std::to_string(i));
    }
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
}

// Creation uploads the launch table from pageable host memory, where
// cudaMemcpy may return before the bytes reach the device; a run enqueued at
// once on a non-blocking stream (nothing on the legacy stream in between)
// must still see the whole table. 40,000 runs make a table of about 1.5 MB,
// so the tail of the upload is what a run would read before it landed.
TEST_F(CudaKernels, PlanRunRightAfterCreationSeesTheWholeTable) {
  std::mt19937_64 rng(115);
  std::uniform_int_distribution<size_t> size(1, 6);
  std::vector<size_t> sizes(40000);
  for (size_t& n : sizes) n = size(rng);
  Buffer src(DataType::kFloat32, Total(sizes), 1);
  FillRandom(src, rng);
  DeviceBuffer dsrc(src);
  std::vector<TensorRef> hrefs, drefs;
  size_t at = 0;
  for (size_t n : sizes) {
    hrefs.push_back({static_cast<float*>(src.data()) + at, n, DataType::kFloat32});
    drefs.push_back({static_cast<float*>(dsrc.data()) + at, n, DataType::kFloat32});
    at += n;
  }
  Buffer want(DataType::kBfloat16, Total(sizes), 0);
  want.Poison();
  reference::Flatten(hrefs, want.data(), DataType::kBfloat16, nullptr, 0.5f);
  for (int rep = 0; rep < 5; ++rep) {
    Buffer got(DataType::kBfloat16, Total(sizes), 0);
    got.Poison();
    DeviceBuffer dgot(got);
    absl::StatusOr<CopyPlan> plan = CopyPlan::Flatten(drefs, dgot.data(), DataType::kBfloat16, nullptr);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->Run(0.5f, stream_).ok());
    Sync();
    dgot.Download(got);
    ExpectSame(got, want, "a run right after creation, try " + std::to_string(rep));
  }
}

}  // namespace
}  // namespace kernels
}  // namespace weft

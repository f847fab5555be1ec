// A stated memory kind classifies no pointer, whatever classifier is
// installed, and gives the results of the calls that classify: the kernels'
// Ex entry points (weft/kernels.h) and communicators made with
// weftConfig_t.trust_memory. What can be told without the driver to
// contradict a stated kind is refused, naming the argument.
//
// The classifiers installed here are fakes that are always asked (as the
// CUDA module's is once a framework has loaded the driver), so every call
// that would classify a pointer is counted. The tests run in file order: the
// last one maps a libcuda into the process.
#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/memory.h"
#include "gtest/gtest.h"
#include "weft/weft.h"

namespace weft {
namespace {

std::atomic<int> g_asked{0};

// Says "device": a host kernel that asked it would take the CUDA path and fail.
PointerKind CountingDevice(const void*) {
  g_asked.fetch_add(1, std::memory_order_relaxed);
  return PointerKind::kDevice;
}
PointerKind CountingHost(const void*) {
  g_asked.fetch_add(1, std::memory_order_relaxed);
  return PointerKind::kHost;
}

// Installs `fn` (asked with or without the driver) for one test.
class Classifier {
 public:
  explicit Classifier(PointerClassifier fn) : before_(SetPointerClassifier(fn, /*needs_driver=*/false)) {
    g_asked = 0;
  }
  ~Classifier() { SetPointerClassifier(before_, /*needs_driver=*/true); }  // the CUDA module's, or none

 private:
  PointerClassifier before_;
};

weftKernelConfig_t Config(int memory) {
  weftKernelConfig_t c = WEFT_KERNEL_CONFIG_INITIALIZER;
  c.memory = memory;
  return c;
}

std::string LastError() { return weftGetLastError(); }

// Inputs of every kernel, small integers and halves so that each result is exact.
struct Inputs {
  std::vector<float> a = {1, 2, 3, 4, 5}, b = {-6, 7, 8};
  std::vector<float> flat = std::vector<float>(8, -99.0f);
  weftTensor_t t[2] = {{a.data(), a.size(), weftFloat32}, {b.data(), b.size(), weftFloat32}};
};

// Every one of the six Ex kernels, stated host, on a stream or not; returns how many failed.
int RunAllStatedHost(void* stream) {
  const weftKernelConfig_t host = Config(weftMemoryHost);
  int failed = 0;
  Inputs in;
  failed += weftFlattenEx(in.t, 2, in.flat.data(), weftFloat32, nullptr, 0.5f, &host, stream) != weftSuccess;
  std::vector<float> a2(5, -1.0f), b2(3, -1.0f);
  const weftTensor_t out[2] = {{a2.data(), 5, weftFloat32}, {b2.data(), 3, weftFloat32}};
  failed += weftUnflattenEx(in.flat.data(), weftFloat32, nullptr, out, 2, 2.0f, 0, &host, stream) != weftSuccess;
  std::vector<float> slabs(2 * 5, -99.0f), a3(5), b3(3);
  failed += weftChunkCatEx(in.t, 2, 2, nullptr, slabs.data(), weftFloat32, 1.0f, &host, stream) != weftSuccess;
  const weftTensor_t back[2] = {{a3.data(), 5, weftFloat32}, {b3.data(), 3, weftFloat32}};
  failed += weftChunkSplitEx(slabs.data(), weftFloat32, 2, nullptr, back, 2, 1.0f, 0, &host, stream) != weftSuccess;
  int found_inf = 0;
  float norms[2] = {0, 0}, total = 0;
  failed += weftUnscaleCheckFiniteEx(in.t, 2, 2.0f, &found_inf, &host, stream) != weftSuccess;
  failed += weftL2NormEx(in.t, 2, norms, &total, &host, stream) != weftSuccess;
  if (stream != nullptr && weftStreamSynchronize(static_cast<weftStream_t>(stream)) != weftSuccess) ++failed;
  EXPECT_EQ(in.flat, (std::vector<float>{0.5f, 1, 1.5f, 2, 2.5f, -3, 3.5f, 4}));
  EXPECT_EQ(a2, (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(b2, (std::vector<float>{-6, 7, 8}));
  EXPECT_EQ(slabs, (std::vector<float>{1, 2, 3, -6, 7, 4, 5, 0, 8, 0}));
  EXPECT_EQ(a3, (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(b3, (std::vector<float>{-6, 7, 8}));
  EXPECT_EQ(found_inf, 0);
  EXPECT_EQ(in.a, (std::vector<float>{2, 4, 6, 8, 10}));  // unscaled by 2 in place before the norm
  // Summed in float64 and rounded once (weft/kernels.h).
  EXPECT_EQ(norms[0], static_cast<float>(std::sqrt(220.0)));  // 4 + 16 + 36 + 64 + 100
  EXPECT_EQ(norms[1], static_cast<float>(std::sqrt(596.0)));  // 144 + 196 + 256
  EXPECT_EQ(total, static_cast<float>(std::sqrt(816.0)));
  return failed;
}

TEST(StatedMemory, StatedHostAsksTheClassifierNothing) {
  Classifier counting(&CountingDevice);
  EXPECT_EQ(RunAllStatedHost(nullptr), 0) << LastError();
  EXPECT_EQ(g_asked.load(), 0);
}

TEST(StatedMemory, StatedHostOnAHostStreamAsksNothing) {
  weftStream_t stream = nullptr;
  ASSERT_EQ(weftStreamCreate(&stream), weftSuccess);
  {
    Classifier counting(&CountingDevice);
    EXPECT_EQ(RunAllStatedHost(stream), 0) << LastError();
    EXPECT_EQ(g_asked.load(), 0);
  }
  EXPECT_EQ(weftStreamDestroy(stream), weftSuccess);
}

// The counter counts: auto (config NULL, or WEFT_MEMORY_AUTO) and the calls
// without Ex classify every tensor and the flat buffer.
TEST(StatedMemory, AutoClassifiesEveryPointer) {
  Classifier counting(&CountingHost);
  Inputs in;
  ASSERT_EQ(weftFlattenEx(in.t, 2, in.flat.data(), weftFloat32, nullptr, 1.0f, nullptr, nullptr), weftSuccess)
      << LastError();
  EXPECT_EQ(g_asked.exchange(0), 3);
  const weftKernelConfig_t autokind = Config(WEFT_MEMORY_AUTO);
  ASSERT_EQ(weftFlattenEx(in.t, 2, in.flat.data(), weftFloat32, nullptr, 1.0f, &autokind, nullptr), weftSuccess);
  EXPECT_EQ(g_asked.exchange(0), 3);
  ASSERT_EQ(weftFlatten(in.t, 2, in.flat.data(), weftFloat32, nullptr, 1.0f, nullptr), weftSuccess);
  EXPECT_EQ(g_asked.exchange(0), 3);
  float total = 0;
  ASSERT_EQ(weftL2NormEx(in.t, 2, nullptr, &total, nullptr, nullptr), weftSuccess);
  EXPECT_EQ(g_asked.exchange(0), 3);  // two tensors and total
}

TEST(StatedMemory, BadConfigIsRefusedNamingIt) {
  Inputs in;
  weftKernelConfig_t c = Config(2);
  EXPECT_EQ(weftFlattenEx(in.t, 2, in.flat.data(), weftFloat32, nullptr, 1.0f, &c, nullptr), weftInvalidArgument);
  EXPECT_NE(LastError().find("weftFlattenEx"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("config->memory = 2"), std::string::npos) << LastError();
  c = Config(weftMemoryHost);
  c.size = 8;
  EXPECT_EQ(weftL2NormEx(in.t, 2, nullptr, nullptr, &c, nullptr), weftInvalidArgument);  // total NULL comes later
  EXPECT_NE(LastError().find("weftKernelConfig_t"), std::string::npos) << LastError();
  EXPECT_EQ(in.flat, std::vector<float>(8, -99.0f));
}

// A stream that is no weft host stream (a cudaStream_t, say) with stated host memory.
TEST(StatedMemory, StatedHostRefusesAForeignStream) {
  Classifier counting(&CountingDevice);
  Inputs in;
  int not_a_stream = 0;
  const weftKernelConfig_t host = Config(weftMemoryHost);
  EXPECT_EQ(weftFlattenEx(in.t, 2, in.flat.data(), weftFloat32, nullptr, 1.0f, &host, &not_a_stream),
            weftInvalidArgument);
  EXPECT_NE(LastError().find("is not a live weft host stream"), std::string::npos) << LastError();
  EXPECT_EQ(g_asked.load(), 0);
}

TEST(StatedMemory, StatedCudaWithoutTheDriverIsRefused) {
  if (CudaDriverLoaded()) GTEST_SKIP() << "a libcuda is mapped in this process already (preloaded?)";
  Classifier counting(&CountingDevice);
  Inputs in;
  const weftKernelConfig_t cuda = Config(weftMemoryCuda);
  int found_inf = 0;
  EXPECT_EQ(weftUnscaleCheckFiniteEx(in.t, 2, 2.0f, &found_inf, &cuda, nullptr), weftInvalidArgument);
  EXPECT_NE(LastError().find("config->memory = weftMemoryCuda, but no CUDA driver is loaded"), std::string::npos)
      << LastError();
  EXPECT_EQ(in.a[0], 1.0f);
  EXPECT_EQ(g_asked.load(), 0);
}

// Collectives, sends and receives on two in-process ranks: the communicator's memory, stated with
// trust_memory = 1, classifies no buffer; without it every buffer is classified (and here, the fake
// saying "device", refused).
int HostCollectives(const weftConfig_t* cfg) {
  weftComm_t comms[2] = {};
  if (weftCommInitInProcess(comms, 2, cfg) != weftSuccess) return -1;
  std::atomic<int> failed{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      std::vector<float> x(64, static_cast<float>(r + 1)), y(128, -1.0f);
      if (weftAllReduce(x.data(), x.data(), 64, weftFloat32, weftSum, comms[r], nullptr) != weftSuccess ||
          x[63] != 3.0f) {
        failed.fetch_add(1);
      }
      if (weftAllGather(x.data(), y.data(), 64, weftFloat32, comms[r], nullptr) != weftSuccess || y[127] != 3.0f) {
        failed.fetch_add(1);
      }
      if (weftSend(x.data(), 64, weftFloat32, 1 - r, comms[r], nullptr) != weftSuccess ||
          weftRecv(y.data(), 64, weftFloat32, 1 - r, comms[r], nullptr) != weftSuccess) {
        failed.fetch_add(1);
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (weftComm_t c : comms) weftCommDestroy(c);
  return failed.load();
}

TEST(StatedMemory, TrustedCommunicatorAsksTheClassifierNothing) {
  Classifier counting(&CountingDevice);
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.trust_memory = 1;
  EXPECT_EQ(HostCollectives(&cfg), 0) << LastError();
  EXPECT_EQ(g_asked.load(), 0);
  // The default classifies, and so refuses what the fake calls device memory.
  EXPECT_EQ(HostCollectives(nullptr), 6);
  EXPECT_GT(g_asked.load(), 0);
}

TEST(StatedMemory, TrustMemoryIsZeroOrOne) {
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  EXPECT_EQ(cfg.trust_memory, 0);
  cfg.trust_memory = 2;
  weftComm_t comm = nullptr;
  EXPECT_EQ(weftCommInitInProcess(&comm, 1, &cfg), weftInvalidArgument);
  EXPECT_NE(LastError().find("config->trust_memory = 2"), std::string::npos) << LastError();
  // A caller compiled before the field (size 48) gets 0, whatever lies past its struct.
  cfg.size = offsetof(weftConfig_t, trust_memory);
  ASSERT_EQ(weftCommInitInProcess(&comm, 1, &cfg), weftSuccess) << LastError();
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

// A reducer made on a trusted communicator marks gradients ready without
// classifying them (weftReducerMarkReady runs once per gradient per step);
// on an untrusted one each mark asks. One rank, so the count is this
// thread's calls alone; the fake says "host", the truth, so both finish.
int MarksAsked(int trust, std::vector<float>* result) {
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.trust_memory = trust;
  weftComm_t comm = nullptr;
  if (weftCommInitInProcess(&comm, 1, &cfg) != weftSuccess) return -1;
  std::vector<std::vector<float>> g = {std::vector<float>(10, 1.5f), std::vector<float>(3000, -2.0f)};
  const weftTensor_t specs[2] = {{nullptr, g[0].size(), weftFloat32}, {nullptr, g[1].size(), weftFloat32}};
  weftReducer_t red = nullptr;
  int asked = -1;
  if (weftReducerCreate(comm, specs, 2, nullptr, &red) == weftSuccess) {
    g_asked = 0;
    bool ok = weftReducerMarkReady(red, 1, g[1].data(), nullptr) == weftSuccess &&
              weftReducerMarkReady(red, 0, g[0].data(), nullptr) == weftSuccess;
    asked = g_asked.load();
    ok = ok && weftReducerFinalize(red, nullptr) == weftSuccess;
    if (!ok) asked = -2;
    *result = {g[0][9], g[1][0], g[1][2999]};
    weftReducerDestroy(red);
  }
  weftCommDestroy(comm);
  return asked;
}

TEST(StatedMemory, TrustedCommunicatorsReducerMarksWithoutAsking) {
  Classifier counting(&CountingHost);
  std::vector<float> result;
  EXPECT_EQ(MarksAsked(1, &result), 0) << LastError();
  EXPECT_EQ(result, (std::vector<float>{1.5f, -2.0f, -2.0f}));  // one rank: the average is the gradient
  EXPECT_GE(MarksAsked(0, &result), 2) << LastError();
  EXPECT_EQ(result, (std::vector<float>{1.5f, -2.0f, -2.0f}));
}

// Last: maps a libcuda (the driver, or the toolkit's stub; loading either
// initialises nothing). A weft host stream for stated CUDA memory is then
// refused naming `stream`, in every build.
TEST(StatedMemory, StatedCudaRefusesAHostStream) {
  const char* stub = std::getenv("WEFT_TEST_CUDA_STUB");
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen(stub != nullptr ? stub : "/usr/local/cuda/lib64/stubs/libcuda.so", RTLD_NOW);
  if (lib == nullptr) GTEST_SKIP() << "no libcuda to map (neither a driver nor the toolkit's stub): " << dlerror();
  ASSERT_TRUE(CudaDriverLoaded());
  weftStream_t stream = nullptr;
  ASSERT_EQ(weftStreamCreate(&stream), weftSuccess);
  {
    Classifier counting(&CountingDevice);
    Inputs in;
    const weftKernelConfig_t cuda = Config(weftMemoryCuda);
    EXPECT_EQ(weftFlattenEx(in.t, 2, in.flat.data(), weftFloat32, nullptr, 1.0f, &cuda, stream),
              weftInvalidArgument);
    EXPECT_NE(LastError().find("is a weft host stream, but the buffers are in CUDA memory"), std::string::npos)
        << LastError();
    EXPECT_EQ(g_asked.load(), 0);
  }
  EXPECT_EQ(weftStreamDestroy(stream), weftSuccess);
}

}  // namespace
}  // namespace weft

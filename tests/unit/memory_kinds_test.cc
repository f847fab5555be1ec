// A host-only job never touches the CUDA driver (core/memory.h): host
// collectives, the reducer and the kernels run without the pointer
// classifier being asked and without libcuda being mapped, in any build; a
// CUDA build is where this matters, since its classifier's first runtime
// call would load the driver and make a context. Once the driver is mapped
// (a framework's CUDA work), pointers are classified again.
//
// The tests run in file order: the last one maps a libcuda into the process.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/memory.h"
#include "gtest/gtest.h"
#include "weft/weft.h"

namespace weft {
namespace {

std::atomic<int> g_asked{0};

// Says "device" so that a host collective it were asked about would fail too.
PointerKind CountingClassifier(const void*) {
  g_asked.fetch_add(1, std::memory_order_relaxed);
  return PointerKind::kDevice;
}

// From /proc/self/maps, independently of CudaDriverLoaded's loader walk.
std::string MappedDriver() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.rfind('/');
    if (slash != std::string::npos && line.compare(slash + 1, 10, "libcuda.so") == 0) return line.substr(slash + 1);
  }
  return "";
}

// Two in-process ranks: an all-reduce, a reducer step over three gradients
// (one of them large enough to be reduced where it lies) and a flatten.
void HostWork() {
  weftComm_t comms[2] = {};
  ASSERT_EQ(weftCommInitInProcess(comms, 2, nullptr), weftSuccess) << weftGetLastError();
  std::vector<std::thread> ranks;
  std::atomic<int> failures{0};
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      std::vector<float> x(1000, static_cast<float>(r + 1));
      if (weftAllReduce(x.data(), x.data(), x.size(), weftFloat32, weftSum, comms[r], nullptr) != weftSuccess ||
          x[999] != 3.0f) {
        failures.fetch_add(1);
      }
      std::vector<std::vector<float>> g = {std::vector<float>(10, 1.0f), std::vector<float>(700000, 1.0f),
                                           std::vector<float>(33, 1.0f)};
      weftTensor_t specs[3];
      for (int i = 0; i < 3; ++i) specs[i] = {nullptr, g[i].size(), weftFloat32};
      weftReducer_t red = nullptr;
      if (weftReducerCreate(comms[r], specs, 3, nullptr, &red) != weftSuccess) {
        failures.fetch_add(1);
        return;
      }
      for (int i = 2; i >= 0; --i) {
        if (weftReducerMarkReady(red, i, g[i].data(), nullptr) != weftSuccess) failures.fetch_add(1);
      }
      if (weftReducerFinalize(red, nullptr) != weftSuccess || g[1][0] != 1.0f) failures.fetch_add(1);
      if (weftReducerDestroy(red) != weftSuccess) failures.fetch_add(1);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0) << weftGetLastError();
  for (weftComm_t c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
  std::vector<float> a(5, 2.0f), b(7, 3.0f), flat(12, 0.0f);
  const weftTensor_t srcs[2] = {{a.data(), a.size(), weftFloat32}, {b.data(), b.size(), weftFloat32}};
  ASSERT_EQ(weftFlatten(srcs, 2, flat.data(), weftFloat32, nullptr, 0.5f, nullptr), weftSuccess) << weftGetLastError();
  EXPECT_EQ(flat[0], 1.0f);
  EXPECT_EQ(flat[11], 1.5f);
}

// Nothing at load time (a static initializer asking the runtime) and
// nothing in the host work maps the driver, whichever classifier the build
// installed.
TEST(MemoryKinds, AHostJobNeverMapsTheDriver) {
  ASSERT_EQ(MappedDriver(), "") << "the CUDA driver was mapped before any work";
  ASSERT_FALSE(CudaDriverLoaded());
  HostWork();
  EXPECT_EQ(MappedDriver(), "") << "host work mapped the CUDA driver";
  EXPECT_FALSE(CudaDriverLoaded());
}

// Without the driver no pointer is classified: the counting classifier,
// installed as the CUDA module installs its own (one that needs the
// driver), would call every pointer device memory and is never asked.
TEST(MemoryKinds, WithoutTheDriverNoPointerIsClassified) {
  ASSERT_FALSE(CudaDriverLoaded());
  const PointerClassifier before = SetPointerClassifier(&CountingClassifier, /*needs_driver=*/true);
  g_asked = 0;
  std::vector<float> x(4);
  EXPECT_EQ(ClassifyPointer(x.data()), PointerKind::kHost);
  HostWork();
  EXPECT_EQ(g_asked.load(), 0);
  SetPointerClassifier(before, /*needs_driver=*/true);  // the CUDA module's, or none
}

// Once a libcuda is mapped (the driver where one is installed, else the
// toolkit's link stub: loading either initialises nothing), the classifier
// is asked again, so a device pointer handed to a host communicator is
// still refused.
TEST(MemoryKinds, OnceTheDriverIsMappedPointersAreClassified) {
  const char* stub = std::getenv("WEFT_TEST_CUDA_STUB");
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen(stub != nullptr ? stub : "/usr/local/cuda/lib64/stubs/libcuda.so", RTLD_NOW);
  if (lib == nullptr) GTEST_SKIP() << "no libcuda to map (neither a driver nor the toolkit's stub): " << dlerror();
  ASSERT_NE(MappedDriver(), "");
  EXPECT_TRUE(CudaDriverLoaded());
  const PointerClassifier before = SetPointerClassifier(&CountingClassifier, /*needs_driver=*/true);
  g_asked = 0;
  std::vector<float> x(4);
  EXPECT_EQ(ClassifyPointer(x.data()), PointerKind::kDevice);
  EXPECT_EQ(g_asked.load(), 1);
  weftComm_t comm = nullptr;
  ASSERT_EQ(weftCommInitInProcess(&comm, 1, nullptr), weftSuccess);
  EXPECT_EQ(weftAllReduce(x.data(), x.data(), x.size(), weftFloat32, weftSum, comm, nullptr), weftInvalidArgument);
  const std::string err = weftGetLastError();
  EXPECT_NE(err.find("device memory"), std::string::npos) << err;
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
  SetPointerClassifier(before, /*needs_driver=*/true);  // the CUDA module's, or none
}

}  // namespace
}  // namespace weft

// What the GPU suites share: a test skips, with the reason printed, when no
// CUDA device is usable here (no driver, no device), and device mirrors of
// the host test buffers at the same misalignment, so 16-byte vector paths and
// scalar heads and tails are exercised as on the host.
//
//   WEFT_REQUIRE_GPU();
//   DeviceBuffer d(host);            // same bytes, same address mod 64
//   ... kernels::Flatten({d.ref()}, ...); d.Download(host);
#ifndef WEFT_TESTS_GPU_GPU_TEST_UTIL_H_
#define WEFT_TESTS_GPU_GPU_TEST_UTIL_H_

#include <cuda_runtime.h>  // cudaMalloc(T**) overloads
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/unit/kernels_test_util.h"

namespace weft {
namespace gputest {

// "" when a device is usable, else why not.
inline std::string NoDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no usable CUDA device: cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
           std::to_string(static_cast<int>(e)) + "): " + cudaGetErrorString(e);
  }
  if (n == 0) return "no usable CUDA device: cudaGetDeviceCount reports 0 devices";
  return "";
}

#define WEFT_REQUIRE_GPU()                                          \
  do {                                                              \
    const std::string weft_reason_ = ::weft::gputest::NoDeviceReason(); \
    if (!weft_reason_.empty()) GTEST_SKIP() << weft_reason_;        \
  } while (0)

#define WEFT_CUDA_OK(expr)                                                                      \
  do {                                                                                          \
    const cudaError_t weft_e_ = (expr);                                                         \
    ASSERT_EQ(weft_e_, cudaSuccess) << #expr << ": " << cudaGetErrorName(weft_e_) << ": "       \
                                    << cudaGetErrorString(weft_e_);                             \
  } while (0)

// Device memory holding a host Buffer's elements at the same address mod 64.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const kernels::testing::Buffer& host)
      : t_(host.dtype()), count_(host.count()), offset_(reinterpret_cast<uintptr_t>(host.data()) % 64) {
    const cudaError_t e = cudaMalloc(&base_, offset_ + host.bytes() + 64);
    if (e != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc(" << offset_ + host.bytes() + 64 << "): " << cudaGetErrorString(e);
      base_ = nullptr;
      return;
    }
    Upload(host);
  }
  ~DeviceBuffer() {
    if (base_ != nullptr) (void)cudaFree(base_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return static_cast<char*>(base_) + offset_; }
  kernels::TensorRef ref() { return {data(), count_, t_}; }
  size_t bytes() const { return count_ * ElementSize(t_); }

  void Upload(const kernels::testing::Buffer& host) {
    if (base_ == nullptr || bytes() == 0) return;
    cudaError_t e = cudaMemcpy(data(), host.data(), bytes(), cudaMemcpyHostToDevice);
    // From pageable memory cudaMemcpy may return before the bytes reach the
    // device, and the streams under test do not wait for the legacy stream.
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) ADD_FAILURE() << "upload: " << cudaGetErrorString(e);
  }
  void Download(kernels::testing::Buffer& host) {
    if (base_ == nullptr || bytes() == 0) return;
    const cudaError_t e = cudaMemcpy(host.data(), data(), bytes(), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) ADD_FAILURE() << "download: " << cudaGetErrorString(e);
  }

 private:
  DataType t_;
  size_t count_;
  size_t offset_;
  void* base_ = nullptr;
};

}  // namespace gputest
}  // namespace weft

#endif  // WEFT_TESTS_GPU_GPU_TEST_UTIL_H_

// Buffer's device half: the CUDA runtime (never the driver library: a
// machine without a driver reports it here as "no usable device").
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_format.h"
#include "bench/check/memory_device.h"

namespace weft_check {
namespace device {

namespace {

absl::Status Check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  return weft::SystemError("--memory cuda: %s: %s (CUDA error %d)", call, cudaGetErrorString(e), static_cast<int>(e));
}

}  // namespace

absl::Status Usable() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
    return absl::UnavailableError(absl::StrFormat("--memory cuda: no usable CUDA device here: %s (CUDA error %d); "
                                                  "this build has CUDA, but the machine has no driver or no device "
                                                  "for it", cudaGetErrorString(e), static_cast<int>(e)));
  }
  RETURN_IF_ERROR(Check(e, "cudaGetDeviceCount"));
  if (n == 0) {
    return absl::UnavailableError("--memory cuda: no usable CUDA device here: the CUDA runtime counts 0 devices");
  }
  return absl::OkStatus();
}

absl::Status Use(int device) { return Check(cudaSetDevice(device), "cudaSetDevice"); }

absl::StatusOr<void*> Alloc(size_t bytes) {
  void* p = nullptr;
  RETURN_IF_ERROR(Check(cudaMalloc(&p, bytes), "cudaMalloc"));
  return p;
}

void Free(void* p) { cudaFree(p); }

absl::Status Copy(void* to, const void* from, size_t bytes, bool to_device) {
  // On the legacy default stream, where weft's NCCL calls with stream NULL
  // run: the copy waits for them, and they for it.
  return Check(cudaMemcpy(to, from, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
               "cudaMemcpy");
}

absl::Status Fill(void* p, int byte, size_t bytes) { return Check(cudaMemset(p, byte, bytes), "cudaMemset"); }

// Polled rather than cudaStreamSynchronize: a collective whose peer never
// joins would block that forever, and weft-check must report the hang.
absl::Status Synchronize(int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(nullptr);
    if (e != cudaErrorNotReady) return Check(e, "cudaStreamQuery");
    if (std::chrono::steady_clock::now() >= until) {
      return absl::DeadlineExceededError(absl::StrFormat("--memory cuda: the collective was still running on the "
                                                         "device after --timeout-ms %d", timeout_ms));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace device
}  // namespace weft_check

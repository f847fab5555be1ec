#include "core/cuda/runtime.h"

#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace cuda {

std::string ErrorText(cudaError_t e) {
  return absl::StrFormat("%s (%d): %s", cudaGetErrorName(e), static_cast<int>(e), cudaGetErrorString(e));
}

bool IsNoDevice(cudaError_t e) {
  switch (e) {
    case cudaErrorInsufficientDriver:   // no driver, or older than the runtime
    case cudaErrorNoDevice:
    case cudaErrorStubLibrary:          // libcuda.so is the toolkit's link stub
    case cudaErrorDevicesUnavailable:   // exclusive-process device held by another process
    case cudaErrorSystemDriverMismatch:
    case cudaErrorSystemNotReady:
      return true;
    default:
      return false;
  }
}

absl::Status ToStatus(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return absl::OkStatus();
  if (IsNoDevice(e)) return Unsupported("%s: no usable CUDA device: %s", what, ErrorText(e));
  return SystemError("%s: %s", what, ErrorText(e));
}

absl::StatusOr<int> DeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    // Not sticky, but clear it so a caller's later cudaGetLastError does not see it.
    (void)cudaGetLastError();
    return ToStatus(e, "cudaGetDeviceCount");
  }
  if (n == 0) return Unsupported("cudaGetDeviceCount: the driver reports no CUDA device");
  return n;
}

namespace {

// Asking the runtime about every pointer on a machine with no driver would
// retry the failed driver load each time: decide once whether there is
// anything to ask about.
bool AnyDevice() {
  static const bool any = [] {
    absl::StatusOr<int> n = DeviceCount();
    if (!n.ok()) Log(LogLevel::kInfo, "pointer classification: every pointer is host memory (%s)", n.status().ToString());
    return n.ok();
  }();
  return any;
}

}  // namespace

PointerKind ClassifyDevicePointer(const void* p) {
  if (p == nullptr || !AnyDevice()) return PointerKind::kHost;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return PointerKind::kHost;
  }
  switch (a.type) {
    case cudaMemoryTypeDevice: return PointerKind::kDevice;
    case cudaMemoryTypeManaged: return PointerKind::kManaged;
    default: return PointerKind::kHost;  // unregistered or pinned host memory
  }
}

namespace {

// Installed at load time; the load touches nothing, and classifications
// reach the runtime only once the driver is mapped (core/memory.h).
[[maybe_unused]] const bool kInstalled = [] {
  SetPointerClassifier(&ClassifyDevicePointer, /*needs_driver=*/true);
  return true;
}();

}  // namespace
}  // namespace cuda
}  // namespace weft

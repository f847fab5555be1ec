#include "kernels/dispatch.h"

#include <utility>

#include "core/status.h"
#include "core/stream.h"

namespace weft {
namespace kernels {

absl::Status RunOnHost(const char* kernel, void* stream, std::function<void()> work) {
  if (stream == nullptr) {
    work();
    return absl::OkStatus();
  }
  HostStream* hs = HostStream::Find(stream);
  if (hs == nullptr) {
    return InvalidArgument("%s: stream = %p is not a live weft host stream (host memory takes NULL or a "
                           "weftStream_t from weftStreamCreate)", kernel, stream);
  }
  hs->Enqueue([work = std::move(work)] {
    work();
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::StatusOr<const DeviceKernels*> DeviceFor(const char* kernel, void* stream) {
  // The wrong stream first: it is the caller's mistake in any build.
  if (stream != nullptr && HostStream::Find(stream) != nullptr) {
    return InvalidArgument("%s: stream = %p is a weft host stream, but the buffers are in CUDA memory (pass a "
                           "cudaStream_t)", kernel, stream);
  }
  const DeviceKernels* dk = GetDeviceKernels();
  if (dk == nullptr) {
    return Unsupported("%s: the buffers are in CUDA memory, but this build of weft has no device kernels", kernel);
  }
  return dk;
}

absl::Status DeviceResult(const char* kernel, const DeviceKernels* dk, int code) {
  if (code == 0) return absl::OkStatus();
  return SystemError("%s: %s kernels failed: %s (%d)", kernel, dk->name, dk->error_string(code), code);
}

}  // namespace kernels
}  // namespace weft

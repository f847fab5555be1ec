// Where a checked kernel call goes once its memory kind is known: host work
// now or on a weft host stream, CUDA work through the registered device
// kernels (kernels/device.h). Shared by the one-shot entry points
// (kernels/kernels.cc) and reusable plans (kernels/copy_plan.cc), so both
// refuse a wrong stream with the same words.
//
//   ASSIGN_OR_RETURN(const DeviceKernels* dk, DeviceFor("flatten", stream));
//   return DeviceResult("flatten", dk, dk->copy(segments, n, scale, false, stream));
#ifndef WEFT_KERNELS_DISPATCH_H_
#define WEFT_KERNELS_DISPATCH_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/device.h"

namespace weft {
namespace kernels {

// Runs host work now (stream == nullptr) or enqueues it on a HostStream. The
// work must own everything it reads but the caller's buffers.
absl::Status RunOnHost(const char* kernel, void* stream, std::function<void()> work);

// The device kernels for a call on CUDA memory: Unsupported when this build
// has none, InvalidArgument when `stream` is a weft host stream.
absl::StatusOr<const DeviceKernels*> DeviceFor(const char* kernel, void* stream);

// A device hook's return code as a status.
absl::Status DeviceResult(const char* kernel, const DeviceKernels* dk, int code);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_DISPATCH_H_

// CUDA runtime glue shared by the CUDA kernels and the NCCL backend.
//
// Built only when weft is built with CUDA. Loading this piece installs the
// pointer classifier of core/memory.h (cudaPointerGetAttributes), so shared
// code learns which memory a pointer lives in without including a CUDA
// header. On a machine without a usable driver (cudaGetDeviceCount fails,
// e.g. cudaErrorInsufficientDriver) every pointer is host memory and
// nothing here fails.
//
//   RETURN_IF_ERROR(cuda::Check(cudaSetDevice(dev), "cudaSetDevice(%d)", dev));
//   ASSIGN_OR_RETURN(int n, cuda::DeviceCount());
#ifndef WEFT_CORE_CUDA_RUNTIME_H_
#define WEFT_CORE_CUDA_RUNTIME_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "core/memory.h"

namespace weft {
namespace cuda {

// "cudaErrorInvalidValue (1): invalid argument".
std::string ErrorText(cudaError_t e);

// OK for cudaSuccess; otherwise SystemError "<what>: <ErrorText>". A missing
// driver or device (no GPU on this machine) becomes Unsupported instead, so
// callers and tests can tell "cannot run here" from "failed".
absl::Status ToStatus(cudaError_t e, const std::string& what);

template <typename... Args>
absl::Status Check(cudaError_t e, const absl::FormatSpec<Args...>& f, const Args&... a) {
  if (e == cudaSuccess) return absl::OkStatus();
  return ToStatus(e, absl::StrFormat(f, a...));
}

// True for the errors that mean "no usable GPU here" rather than a fault.
bool IsNoDevice(cudaError_t e);

// Number of devices, or Unsupported with the driver's reason when there are
// none (no driver, no device, driver older than the runtime).
absl::StatusOr<int> DeviceCount();

// The classifier installed at load time (exposed for tests).
PointerKind ClassifyDevicePointer(const void* p);

}  // namespace cuda
}  // namespace weft

#endif  // WEFT_CORE_CUDA_RUNTIME_H_

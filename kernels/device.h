// The hook table through which a device implementation of the kernels (the
// CUDA one, kernels/cuda) makes itself known.
//
// Shared code never asks whether CUDA was built: kernels/kernels.cc classifies
// the pointers (core/memory.h) and, for device memory, calls the table
// registered here, or refuses with "no device kernels in this build". The
// device module registers itself from a static initializer, as comm backends
// do through comm/registry.h:
//
//   namespace { const bool registered = weft::kernels::RegisterDeviceKernels(&kCudaKernels); }
//
// Every hook sees only checked arguments (dtypes valid and supported, no NULL
// with a non-zero count, no overlap, every pointer in device memory), enqueues
// its work on `stream` (a cudaStream_t) and returns without synchronising. It
// returns 0 on success, or an error code that error_string describes. The
// arrays it is given (segments, tensors) are host memory owned by the caller
// and valid only during the call; found_inf, norms and total are device
// pointers. Results must be the reference's bits (kernels/reference), so no
// contracted multiply-add: use __fmul_rn / __fadd_rn (or __dmul_rn/__dadd_rn).
//
// No Abseil and no STL: this header is included by .cu files.
#ifndef WEFT_KERNELS_DEVICE_H_
#define WEFT_KERNELS_DEVICE_H_

#include <cstddef>

#include "kernels/types.h"

namespace weft {
namespace kernels {

struct DeviceKernels {
  const char* name;  // "cuda"
  // For every segment s: s.dst[k] = convert(s.dst_t, scale * s.src[k]) (+ old
  // s.dst[k] when accumulate); s.src == nullptr writes zeros. Segments never
  // overlap one another's destinations.
  int (*copy)(const Segment* segments, size_t n, float scale, bool accumulate, void* stream);
  // Each element *= inv_scale in place; *found_inf = 1 if any result is inf or
  // NaN, left untouched otherwise.
  int (*unscale)(const TensorRef* tensors, size_t n, float inv_scale, int* found_inf, void* stream);
  // kernels/types.h's blocking; norms may be nullptr.
  int (*l2norm)(const TensorRef* tensors, size_t n, float* norms, float* total, void* stream);
  // A copy planned once (kernels/copy_plan.h): plan_create takes the
  // segments and accumulate of copy and makes an opaque plan that keeps its
  // launch table in device memory (it may allocate and synchronise);
  // plan_run enqueues the copy with this scale on `stream` and nothing else
  // (capturable in a CUDA graph); plan_destroy waits until no run can still
  // be in flight on any stream, then frees the plan.
  int (*plan_create)(const Segment* segments, size_t n, bool accumulate, void** plan);
  int (*plan_run)(const void* plan, float scale, void* stream);
  int (*plan_destroy)(void* plan);
  const char* (*error_string)(int code);
};

// Installs `k` (which must outlive the process); the last registration wins.
// Returns true so it can initialise a static.
bool RegisterDeviceKernels(const DeviceKernels* k);
// nullptr when no device implementation is built.
const DeviceKernels* GetDeviceKernels();

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_DEVICE_H_

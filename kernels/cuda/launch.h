// The CUDA implementations of kernels/device.h's hooks (no Abseil: included
// by .cu files). register.cu installs them at load time; the checked entry
// points of kernels/kernels.h reach them for device memory.
//
// CopySegments, Unscale and L2Norm only enqueue work on `stream` (a
// cudaStream_t) on the current device: no synchronisation, no host-visible
// result, no cudaMalloc, so all can be captured in a CUDA graph (plans:
// below). L2Norm takes its scratch stream-ordered (cudaMallocAsync /
// cudaFreeAsync), which capture records as allocation nodes. As with any
// CUDA library, make one call outside a capture first: it loads the kernels'
// module and asks for their occupancy once. Results are the reference's bits
// (kernels/reference), NaN payloads included. Each returns a cudaError_t as
// int (0 on success).
//
//   const int err = CopySegments(plan.segments.data(), plan.segments.size(), 0.5f, false, stream);
#ifndef WEFT_KERNELS_CUDA_LAUNCH_H_
#define WEFT_KERNELS_CUDA_LAUNCH_H_

#include <cstddef>

#include "kernels/types.h"

namespace weft {
namespace kernels {
namespace cuda {

int CopySegments(const Segment* segments, size_t n, float scale, bool accumulate, void* stream);
int Unscale(const TensorRef* tensors, size_t n, float inv_scale, int* found_inf, void* stream);
int L2Norm(const TensorRef* tensors, size_t n, float* norms, float* total, void* stream);
// "cudaErrorInvalidValue: invalid argument".
const char* ErrorString(int code);

// A copy planned once (kernels/copy_plan.h on CUDA memory): CopySegments'
// launch table built at creation and uploaded to device memory, so that a
// run is one launch per (source, destination) type pair present (one for a
// list of one type) and does nothing else on the host: no table building, no
// allocation, no synchronisation; it can be captured in a CUDA graph, and
// creation has already loaded its kernels.
//
//   DevicePlan* plan = nullptr;
//   CopyPlanCreate(segments, n, /*accumulate=*/false, &plan);    // once: cudaMalloc + upload
//   CopyPlanRun(plan, 1.0f / world, stream);                      // every step, any stream
//   CopyPlanDestroy(plan);                                        // waits for the device
//
// The plan belongs to the device current at creation; a run with another
// device current fails with cudaErrorInvalidDevice. Runs may go to several
// streams, concurrently if their destinations allow. Destroy waits for the
// whole device (cudaDeviceSynchronize), which covers every stream a run may
// still be queued on, then frees the table: call it at teardown, not while a
// stream is being captured, and not while a CUDA graph that captured a run
// may still be launched (the graph reads the table). Create also
// synchronises (cudaMalloc, cudaMemcpy): create plans outside a capture.
struct DevicePlan;
int CopyPlanCreate(const Segment* segments, size_t n, bool accumulate, DevicePlan** plan);
int CopyPlanRun(const DevicePlan* plan, float scale, void* stream);
int CopyPlanDestroy(DevicePlan* plan);

}  // namespace cuda
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CUDA_LAUNCH_H_

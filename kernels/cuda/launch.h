// The CUDA implementations of kernels/device.h's hooks (no Abseil: included
// by .cu files). register.cu installs them at load time; the checked entry
// points of kernels/kernels.h reach them for device memory.
//
// Each one only enqueues work on `stream` (a cudaStream_t) on the current
// device: no synchronisation, no host-visible result, no cudaMalloc, so all
// can be captured in a CUDA graph. L2Norm takes its scratch stream-ordered
// (cudaMallocAsync/cudaFreeAsync), which capture records as allocation
// nodes. As with any CUDA library, make one call outside a capture first:
// it loads the kernels' module and asks for their occupancy once. Results are the reference's bits (kernels/reference), NaN payloads
// included. Each returns a cudaError_t as int (0 on success).
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

}  // namespace cuda
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CUDA_LAUNCH_H_

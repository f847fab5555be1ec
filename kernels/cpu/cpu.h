// The host implementation of the kernels: vectorised for the CPU it runs on
// (AVX-512, AVX2/F16C or portable C++, chosen once at run time) and split
// across the host thread pool (core/thread_pool.h) when the input is large.
// Arguments are already checked (kernels/kernels.cc); results are the
// reference's bits (kernels/reference).
//
//   cpu::Copy(plan.segments, 0.125f, /*accumulate=*/false);
#ifndef WEFT_KERNELS_CPU_CPU_H_
#define WEFT_KERNELS_CPU_CPU_H_

#include <cstddef>

#include "absl/types/span.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {
namespace cpu {

void Copy(absl::Span<const Segment> segments, float scale, bool accumulate);
void UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf);
void L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total);

// "avx512", "avx2" or "portable": what this CPU runs.
const char* IsaName();

}  // namespace cpu
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CPU_CPU_H_

// The host implementation of the kernels: vectorised for the CPU it runs on
// (AVX-512, AVX2/F16C or portable C++, chosen once at run time) and split
// across the host thread pool (core/thread_pool.h) when the input is large.
// Arguments are already checked (kernels/kernels.cc); results are the
// reference's bits (kernels/reference).
//
//   cpu::Copy(list.segments, 0.125f, /*accumulate=*/false);
//
//   cpu::PreparedCopy prepared;                   // once, for a fixed layout
//   cpu::Prepare(list.segments, prepared);
//   cpu::Run(prepared, 0.125f, /*accumulate=*/false);  // every step
#ifndef WEFT_KERNELS_CPU_CPU_H_
#define WEFT_KERNELS_CPU_CPU_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {
namespace cpu {

void Copy(absl::Span<const Segment> segments, float scale, bool accumulate);

// A copy's segments with the work of sharing them out done ahead: cut into
// pieces and grouped into thread-pool tasks of about 256 KiB (many tiny
// segments per task, a huge one over every thread), with the totals and the
// type pair every run needs. Run() then only converts.
struct PreparedCopy {
  std::vector<Segment> pieces;    // the segments, large ones cut in slices
  std::vector<size_t> tasks;      // task t runs pieces [tasks[t], tasks[t + 1]); empty: run inline
  bool stream = false;            // non-temporal stores (the destination is larger than the caches)
  bool uniform = true;            // every segment has the type pair src_t -> dst_t
  DataType src_t = DataType::kFloat32, dst_t = DataType::kFloat32;
};
void Prepare(absl::Span<const Segment> segments, PreparedCopy& out);
void Run(const PreparedCopy& copy, float scale, bool accumulate);
void UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf);
void L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total);

// "avx512", "avx2" or "portable": what this CPU runs.
const char* IsaName();

}  // namespace cpu
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CPU_CPU_H_

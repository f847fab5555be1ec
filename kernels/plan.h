// Turns the copy-like kernels' arguments into segments (kernels/types.h), the
// one form the host and device implementations execute, and checks them.
//
// Flatten, Unflatten, ChunkCat and ChunkSplit differ only in where each run of
// elements comes from and goes to; once that is written down as segments, one
// engine converts them all, and one overlap check covers them all.
//
//   CopyPlan plan;
//   RETURN_IF_ERROR(PlanFlatten(srcs, dst, dst_t, offsets, plan));
#ifndef WEFT_KERNELS_PLAN_H_
#define WEFT_KERNELS_PLAN_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {

struct CopyPlan {
  std::vector<Segment> segments;
  std::vector<int> tensor;  // segments[k] belongs to tensor tensor[k] of the call
  // How errors name a segment's source and destination, e.g. "srcs" / "dst region of srcs".
  const char* src_label = "";
  const char* dst_label = "";
  size_t total = 0;  // elements over all segments
};

// Each checks its arguments (dtypes, NULL data, alignment, chunk sizes) and
// replaces `plan`'s contents (keeping its vectors' capacity, so a plan reused
// across calls does not allocate). Segments of zero elements are dropped.
absl::Status PlanFlatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets,
                         CopyPlan& plan);
absl::Status PlanUnflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
                           CopyPlan& plan);
absl::Status PlanChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts, void* dst,
                          DataType dst_t, CopyPlan& plan);
absl::Status PlanChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                            absl::Span<const TensorRef> dsts, CopyPlan& plan);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_PLAN_H_

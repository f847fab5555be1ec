// Turns the copy-like kernels' arguments into segments (kernels/types.h), the
// one form the host and device implementations execute, and checks them.
//
// Flatten, Unflatten, ChunkCat and ChunkSplit differ only in where each run of
// elements comes from and goes to; once that is written down as segments, one
// engine converts them all, and one overlap check covers them all.
//
//   ASSIGN_OR_RETURN(CopyPlan plan, PlanFlatten(srcs, dst, dst_t, offsets));
//   RETURN_IF_ERROR(CheckNoOverlap(plan));
#ifndef WEFT_KERNELS_PLAN_H_
#define WEFT_KERNELS_PLAN_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
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

// Checked: dtypes, NULL data, alignment, chunk sizes. Segments of zero elements are dropped.
absl::StatusOr<CopyPlan> PlanFlatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t,
                                     const size_t* offsets);
absl::StatusOr<CopyPlan> PlanUnflatten(const void* src, DataType src_t, const size_t* offsets,
                                       absl::Span<const TensorRef> dsts);
absl::StatusOr<CopyPlan> PlanChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts,
                                      void* dst, DataType dst_t);
absl::StatusOr<CopyPlan> PlanChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                                        absl::Span<const TensorRef> dsts);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_PLAN_H_

// Turns the copy-like kernels' arguments into segments (kernels/types.h), the
// one form the host and device implementations execute, and checks them. The
// one-shot calls (kernels/kernels.cc) list into per-thread scratch on every
// call; a CopyPlan (kernels/copy_plan.h) lists once and keeps the result.
//
// Flatten, Unflatten, ChunkCat and ChunkSplit differ only in where each run of
// elements comes from and goes to; once that is written down as segments, one
// engine converts them all, and one overlap check covers them all.
//
//   SegmentList list;
//   RETURN_IF_ERROR(PlanFlatten(srcs, dst, dst_t, offsets, list));
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

struct SegmentList {
  std::vector<Segment> segments;
  std::vector<int> tensor;  // segments[k] belongs to tensor tensor[k] of the call
  // How errors name a segment's source and destination, e.g. "srcs" / "dst region of srcs".
  const char* src_label = "";
  const char* dst_label = "";
  size_t total = 0;  // elements over all segments
  // The flat side of the copy (dst of a flatten or chunk-cat, src of an
  // unflatten or chunk-split): one buffer, so its memory kind is found once.
  const void* flat = nullptr;
  const char* flat_label = "";
  bool flat_is_src = false;
};

// Each checks its arguments (dtypes, NULL data, alignment, chunk sizes) and
// replaces `list`'s contents (keeping its vectors' capacity, so a list reused
// across calls does not allocate). Segments of zero elements are dropped.
absl::Status PlanFlatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets,
                         SegmentList& list);
absl::Status PlanUnflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
                           SegmentList& list);
absl::Status PlanChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts, void* dst,
                          DataType dst_t, SegmentList& list);
absl::Status PlanChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                            absl::Span<const TensorRef> dsts, SegmentList& list);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_PLAN_H_

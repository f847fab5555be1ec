// The reducer's segment plan: how each segment of each bucket is reduced.
//
// A pure function of the bucket plan, the gradient list, the reducer's
// options and what the communicator offers (asked once: comm/direct.h), so
// it is golden-tested without any communication, and every rank that feeds
// it the same inputs issues the same collectives. The reducer makes it when
// it lays out its buckets; launching a segment then follows its way:
//   copy      the gradients are copied into the bucket's segment (the 1/N
//             fused into the copy-in), the segment is all-reduced with a
//             sum, the averages copied back out;
//   in place  the segment lies wholly inside one gradient of the bucket's
//             type (not float16, whose 1/N copy-in keeps a sum of large
//             gradients from overflowing): averaged where the gradient lies.
//             A rank whose gradient is not there to reduce (unused, a view,
//             misaligned) copies it through the slot unscaled instead: the
//             same collective, on other memory;
//   pieces    separate buffers on a backend that reduces pieces, when the
//             segment's gradients all have the bucket's type and average at
//             least min_piece_bytes: averaged straight from and into them
//             (DirectReduce::AllReducePieces);
//   ready     gradients as bucket views on a backend whose ranks agree on
//             what is ready within the call: an AllReduceReady over the
//             bucket, which takes every later segment all ranks have ready,
//             and where a ready buffer in parts costs what one buffer does
//             (ReducesReadyParts), over the following buckets of the same
//             dtype too (a chain: one ReadyBuffer);
//   device    CUDA memory: the bucket is one segment (NCCL pipelines a large
//             message itself), copies and all-reduce on the comm stream.
//
//   SegmentPlan sp = PlanSegments(plan, grads, options, SegmentCaps{2, false, true, true, true});
//   sp.buckets[0].way[k]   // SegmentWay::kPieces, ...
#ifndef WEFT_SHARD_SEGMENT_PLAN_H_
#define WEFT_SHARD_SEGMENT_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "core/dtype.h"
#include "shard/bucket_plan.h"
#include "shard/reducer.h"

namespace weft {
namespace shard {

enum class SegmentWay : uint8_t { kCopy, kInPlace, kPieces, kReady, kDevice };
const char* Name(SegmentWay w);

// What the plan needs to know of the communicator.
struct SegmentCaps {
  int world_size = 1;
  bool device = false;                // CUDA memory
  bool reduces_pieces = false;        // DirectReduce::ReducesPieces
  bool agrees_ready_in_call = false;  // DirectReduce::AgreesReadyInCall
  bool reduces_ready_parts = false;   // DirectReduce::ReducesReadyParts
};

// How a segment's values are scaled and combined (shard/reducer.h, "The
// division by the world size").
struct SegmentMath {
  float scale_in = 1.0f;   // in the copy-in
  float scale_out = 1.0f;  // in the copy-out
  RedOp op = RedOp::kSum;
};

struct BucketSegments {
  std::vector<Segment> segs;           // in the bucket's elements
  std::vector<SegmentWay> way;         // per segment
  std::vector<SegmentMath> math;       // per segment
  std::vector<int> seg_grads;          // per segment: gradients overlapping it
  // Per segment: the slots overlapping it, [seg_slot[k], seg_slot_end[k])
  // (slots ascend by offset, so they are contiguous); an in-place
  // segment's gradient is the one at seg_slot[k].
  std::vector<size_t> seg_slot, seg_slot_end;
  // Per slot: the segments it overlaps, [slot_seg[s], slot_seg_end[s]).
  std::vector<size_t> slot_seg, slot_seg_end;
  // Ready segments: the chain's first bucket (the ReadyBuffer's owner), this
  // bucket's first segment and first element in it; -1 for other ways.
  int ready_first = -1;
  size_t ready_seg0 = 0;
  size_t ready_elem0 = 0;
  size_t segments() const { return segs.size(); }
};

struct SegmentPlan {
  std::vector<BucketSegments> buckets;  // per bucket of the bucket plan
};

// `grads` as given to PlanBuckets; options already checked by the reducer.
SegmentPlan PlanSegments(const BucketPlan& plan, absl::Span<const GradSpec> grads, const ReducerOptions& options,
                         const SegmentCaps& caps);

// One letter per segment, buckets separated by '|' (C copy, I in place,
// P pieces, R ready, D device): for golden tests and logs.
std::string Describe(const SegmentPlan& plan);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_SEGMENT_PLAN_H_

// The bucket plan: which gradients share a bucket, and where each one sits.
//
// A pure function of the gradient list and the options (UCC's coll_score
// shape: data in, data out), so it is golden-tested and benchmarked without
// any communication, and every rank that feeds it the same list gets the same
// plan. The reducer (shard/reducer.h) flattens each bucket's gradients into
// one buffer and all-reduces it while backward goes on.
//
// The rules, as PyTorch DDP's compute_bucket_assignment_by_size:
//   order    gradients are visited in `options.order` when given (the order
//            they became ready in, for a rebuild), else in reverse
//            registration order, since backward produces the last layers
//            first;
//   family   one bucket family per (dtype, memory kind); each family has one
//            open bucket that fills up in visiting order;
//   cap      a family's first bucket closes at first_bucket_cap_bytes (small,
//            so communication starts early), later ones at bucket_cap_bytes;
//            a gradient that would overflow a non-empty bucket starts a new
//            one, so a gradient larger than the cap sits alone;
//   slots    each slot starts at a multiple of alignment_bytes (in the
//            bucket's element type: the comm dtype when one is set);
//   padding  a bucket's length is rounded up to pad_multiple elements (the
//            world size, for the sharder's equal reduce-scatter blocks);
//   ordering buckets are numbered by the visiting position of their first
//            gradient, which is the order in which they start filling.
//
//   std::vector<GradSpec> grads = {{1000, DataType::kFloat32}, {10, DataType::kFloat32}};
//   ASSIGN_OR_RETURN(BucketPlan plan, PlanBuckets(grads, PlanOptions{}));
//   plan.buckets[0].grads   // {1, 0}: the last gradient first
#ifndef WEFT_SHARD_BUCKET_PLAN_H_
#define WEFT_SHARD_BUCKET_PLAN_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace weft {
namespace shard {

struct GradSpec {
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  MemKind memory = MemKind::kHost;
  std::string name;  // optional; used in error messages
};

struct PlanOptions {
  size_t bucket_cap_bytes = size_t{25} << 20;
  size_t first_bucket_cap_bytes = size_t{1} << 20;
  size_t alignment_bytes = 16;  // a power of two, at least 1
  size_t pad_multiple = 1;      // bucket lengths are a multiple of this many elements
  // Buckets of floating-point gradients hold this type instead (compression).
  std::optional<DataType> comm_dtype;
  // A permutation of 0..n-1: the visiting order. Empty: reverse registration order.
  std::vector<int> order;
};

struct Bucket {
  DataType dtype = DataType::kFloat32;  // element type of the bucket (comm dtype)
  MemKind memory = MemKind::kHost;
  std::vector<int> grads;       // gradient indices, in slot order
  std::vector<size_t> offsets;  // element offset of each slot, ascending
  size_t length = 0;            // elements, padded
  size_t bytes() const { return length * ElementSize(dtype); }
};

struct BucketPlan {
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of;  // per gradient: its bucket
  std::vector<int> slot_of;    // per gradient: its position in that bucket's grads
};

// Refuses invalid dtypes, a bad order, zero caps and alignment that is not a
// power of two, naming the offending value (and gradient).
absl::StatusOr<BucketPlan> PlanBuckets(absl::Span<const GradSpec> grads, const PlanOptions& options);

// A bucket's segments, in elements: the pieces the host reducer copies in,
// all-reduces (one collective call each) and copies out, in order. Pure
// function of the layout, so every rank cuts the same calls.
//   whole    a slot marked whole (the reducer: its gradient has the bucket's
//            type, so it can be averaged where it lies, without copies) of
//            at least `target` elements is one segment by itself: its
//            gradient is ready all at once, so cutting it would add calls
//            and no overlap;
//   the rest runs of consecutive slots cut every `target` elements, cache-
//            sized pieces whose copy-in, all-reduce and copy-out stay in cache
//            and start as soon as their own gradients are in.
// Elements outside every slot at the end (padding) and empty slots are in
// no segment: there is nothing to reduce there.
struct Segment {
  size_t begin = 0, end = 0;  // [begin, end) in the bucket's elements
};
std::vector<Segment> CutSegments(const Bucket& bucket, absl::Span<const size_t> slot_counts, size_t target,
                                 const std::vector<bool>& whole);

// The bucket element type for gradients of type `t`.
DataType BucketType(DataType t, const PlanOptions& options);

// "'name'" when the gradient has a name, else "#index": for error messages.
std::string GradLabel(absl::Span<const GradSpec> grads, int index);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_BUCKET_PLAN_H_

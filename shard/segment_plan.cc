#include "shard/segment_plan.h"

#include <algorithm>
#include <cmath>

namespace weft {
namespace shard {

namespace {

// Whether a gradient of type `t` in bucket `bk` may be averaged where it
// lies: the bucket's own type, except float16, whose 1/N copy-in is what
// keeps a sum of large gradients from overflowing.
bool InPlaceType(const Bucket& bk, DataType t) { return t == bk.dtype && bk.dtype != DataType::kFloat16; }

SegmentMath BucketMath(const Bucket& bk, const ReducerOptions& o, int world_size) {
  SegmentMath m;
  const float n = static_cast<float>(world_size);
  if (!IsFloating(bk.dtype) || o.gradient_as_bucket_view) {
    m.op = RedOp::kAvg;  // in place; integers divide with truncation
  } else if (bk.dtype == DataType::kFloat16 && o.comm_dtype) {
    m.scale_in = m.scale_out = 1.0f / std::sqrt(n);  // neither the sum nor the result overflows
  } else {
    m.scale_in = 1.0f / n;
  }
  return m;
}

// The segment lies wholly inside one gradient of the bucket's type, with no
// alignment gap or padding in it (those exist only in the bucket).
bool Whole(const Bucket& bk, absl::Span<const GradSpec> grads, const BucketSegments& bs, size_t k) {
  if (bs.seg_slot_end[k] != bs.seg_slot[k] + 1) return false;
  const size_t s = bs.seg_slot[k];
  const GradSpec& spec = grads[bk.grads[s]];
  return InPlaceType(bk, spec.dtype) && bk.offsets[s] <= bs.segs[k].begin &&
         bk.offsets[s] + spec.count >= bs.segs[k].end;
}

// Pieces only where every gradient has the bucket's type (no cast in a
// copy) and they average min_piece_bytes: each piece costs the backend a few
// calls per chunk or round, where a copy plan moves many tiny gradients in
// one pass (10,000 gradients of 1-512 elements ran 50% slower in pieces).
// Float16 needs no 1/N before the sum: the backends that reduce pieces
// accumulate halves in float32.
bool Pieces(const Bucket& bk, absl::Span<const GradSpec> grads, const BucketSegments& bs, size_t k,
            const ReducerOptions& o) {
  size_t pieces = 0;
  for (size_t s = bs.seg_slot[k]; s < bs.seg_slot_end[k]; ++s) {
    const GradSpec& g = grads[bk.grads[s]];
    if (g.dtype != bk.dtype) return false;
    pieces += g.count > 0 ? 1 : 0;
  }
  const size_t bytes = (bs.segs[k].end - bs.segs[k].begin) * ElementSize(bk.dtype);
  return pieces > 0 && bytes >= pieces * o.min_piece_bytes;
}

// Which segments each slot overlaps and which slots each segment does.
void IndexSlots(const Bucket& bk, absl::Span<const GradSpec> grads, BucketSegments& bs) {
  const size_t n = bk.grads.size(), segments = bs.segs.size();
  bs.seg_grads.assign(segments, 0);
  bs.seg_slot.assign(segments, n);
  bs.seg_slot_end.assign(segments, 0);
  bs.slot_seg.assign(n, 0);
  bs.slot_seg_end.assign(n, 0);
  size_t k = 0;  // segments and slots both ascend: one pass
  for (size_t s = 0; s < n; ++s) {
    const size_t count = grads[bk.grads[s]].count;
    if (count == 0) continue;  // holds no element, so no segment waits for it
    const size_t o = bk.offsets[s], e = o + count;
    while (k < segments && bs.segs[k].end <= o) ++k;
    bs.slot_seg[s] = k;
    for (size_t j = k; j < segments && bs.segs[j].begin < e; ++j) {
      ++bs.seg_grads[j];
      bs.seg_slot[j] = std::min(bs.seg_slot[j], s);
      bs.seg_slot_end[j] = s + 1;
      bs.slot_seg_end[s] = j + 1;
    }
  }
}

}  // namespace

const char* Name(SegmentWay w) {
  switch (w) {
    case SegmentWay::kCopy: return "copy";
    case SegmentWay::kInPlace: return "in place";
    case SegmentWay::kPieces: return "pieces";
    case SegmentWay::kReady: return "ready";
    case SegmentWay::kDevice: return "device";
  }
  return "invalid";
}

SegmentPlan PlanSegments(const BucketPlan& plan, absl::Span<const GradSpec> grads, const ReducerOptions& options,
                         const SegmentCaps& caps) {
  SegmentPlan out;
  // Views on a backend that settles the ready extent within the call.
  const bool ready = !caps.device && options.gradient_as_bucket_view && options.merge_ready_segments &&
                     caps.agrees_ready_in_call;
  const bool pieces = !caps.device && options.reduce_in_pieces && !options.gradient_as_bucket_view &&
                      caps.reduces_pieces;
  int chain = -1;  // the open chain's first bucket
  size_t chain_segs = 0, chain_elems = 0;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const Bucket& bk = plan.buckets[b];
    BucketSegments bs;
    const size_t n = bk.grads.size();
    std::vector<size_t> counts(n);
    std::vector<bool> whole(n);
    for (size_t s = 0; s < n; ++s) {
      counts[s] = grads[bk.grads[s]].count;
      whole[s] = InPlaceType(bk, grads[bk.grads[s]].dtype);
    }
    bs.segs = caps.device ? std::vector<Segment>{{0, bk.length}}
                          : CutSegments(bk, counts, std::max<size_t>(options.segment_bytes / ElementSize(bk.dtype), 1),
                                        whole);
    IndexSlots(bk, grads, bs);
    const SegmentMath math = BucketMath(bk, options, caps.world_size);
    for (size_t k = 0; k < bs.segments(); ++k) {
      SegmentWay way = SegmentWay::kCopy;
      SegmentMath m = math;
      if (caps.device) {
        way = SegmentWay::kDevice;
      } else if (ready) {
        way = SegmentWay::kReady;  // a whole gradient that is not its slot is copied in like any other
      } else if (Whole(bk, grads, bs, k)) {
        way = SegmentWay::kInPlace;
        m = SegmentMath{1.0f, 1.0f, RedOp::kAvg};
      } else if (pieces && Pieces(bk, grads, bs, k, options)) {
        way = SegmentWay::kPieces;
        m = SegmentMath{1.0f, 1.0f, RedOp::kAvg};
      }
      bs.way.push_back(way);
      bs.math.push_back(m);
    }
    if (ready) {
      // A chain runs on over buckets of one dtype where parts cost nothing
      // more; elsewhere each bucket is a ReadyBuffer of its own.
      if (chain < 0 || !caps.reduces_ready_parts || plan.buckets[static_cast<size_t>(chain)].dtype != bk.dtype) {
        chain = static_cast<int>(b);
        chain_segs = chain_elems = 0;
      }
      bs.ready_first = chain;
      bs.ready_seg0 = chain_segs;
      bs.ready_elem0 = chain_elems;
      chain_segs += bs.segments();
      chain_elems += bk.length;
    }
    out.buckets.push_back(std::move(bs));
  }
  return out;
}

std::string Describe(const SegmentPlan& plan) {
  std::string s;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    if (b > 0) s += '|';
    for (SegmentWay w : plan.buckets[b].way) s += "CIPRD"[static_cast<int>(w)];
  }
  return s;
}

}  // namespace shard
}  // namespace weft

// Golden tests of the reducer's segment plan (shard/segment_plan.h): which
// way each segment goes, with what math, for each kind of communicator.
#include "shard/segment_plan.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace shard {
namespace {

using ::testing::ElementsAre;

std::vector<GradSpec> Specs(const std::vector<size_t>& counts, DataType t = DataType::kFloat32) {
  std::vector<GradSpec> g;
  for (size_t c : counts) g.push_back({c, t, MemKind::kHost, ""});
  return g;
}

// Registered: one large gradient, three of 600 floats, six of 10. Visited
// last first, in one bucket: six 10s at 0, 12, ..., 60 (16-byte slots), the
// 600s at 72, 672 and 1272, the large one at 1872 to 4872. With 1024-float
// segments: [0, 1024) over the 10s and two 600s, [1024, 1872) over two
// 600s, and the large one alone.
const std::vector<size_t> kCounts = {3000, 600, 600, 600, 10, 10, 10, 10, 10, 10};

ReducerOptions Small() {
  ReducerOptions o;
  o.segment_bytes = 4096;
  o.min_piece_bytes = 1024;
  return o;
}

const SegmentCaps kInProcess{4, false, true, true, true};
const SegmentCaps kPointToPoint{4, false, false, false, false};
const SegmentCaps kOneNode{4, false, true, true, false};  // MPI or UCX on one node
const SegmentCaps kCuda{4, true, false, false, false};

SegmentPlan Plan(const std::vector<GradSpec>& grads, const ReducerOptions& o, const SegmentCaps& caps) {
  PlanOptions po;
  po.bucket_cap_bytes = o.bucket_cap_bytes;
  po.first_bucket_cap_bytes = o.bucket_cap_bytes;
  po.comm_dtype = o.comm_dtype;
  absl::StatusOr<BucketPlan> plan = PlanBuckets(grads, po);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? PlanSegments(*plan, grads, o, caps) : SegmentPlan{};
}

TEST(SegmentPlan, SeparateBuffersCopyPiecesInPlace) {
  const SegmentPlan sp = Plan(Specs(kCounts), Small(), kInProcess);
  ASSERT_EQ(sp.buckets.size(), 1u);
  const BucketSegments& b = sp.buckets[0];
  ASSERT_EQ(b.segments(), 3u);
  EXPECT_EQ(b.segs[0].begin, 0u);
  EXPECT_EQ(b.segs[0].end, 1024u);
  EXPECT_EQ(b.segs[1].end, 1872u);
  EXPECT_EQ(b.segs[2].end, 4872u);
  // 8 gradients in 4 KiB average 512 bytes, under min_piece_bytes: copied.
  // 2 in 3,392 bytes: pieces. The large one: in place.
  EXPECT_EQ(Describe(sp), "CPI");
  EXPECT_THAT(b.seg_grads, ElementsAre(8, 2, 1));
  EXPECT_THAT(b.seg_slot, ElementsAre(0, 7, 9));
  EXPECT_THAT(b.seg_slot_end, ElementsAre(8, 9, 10));
  EXPECT_EQ(b.slot_seg[7], 0u);
  EXPECT_EQ(b.slot_seg_end[7], 2u);  // the 600 at 672 crosses into the second segment
  // The copy fuses 1/N into its copy-in and sums; the others average.
  EXPECT_EQ(b.math[0].op, RedOp::kSum);
  EXPECT_FLOAT_EQ(b.math[0].scale_in, 0.25f);
  EXPECT_FLOAT_EQ(b.math[0].scale_out, 1.0f);
  for (size_t k : {1, 2}) {
    EXPECT_EQ(b.math[k].op, RedOp::kAvg) << k;
    EXPECT_FLOAT_EQ(b.math[k].scale_in, 1.0f) << k;
  }
  EXPECT_EQ(b.ready_first, -1);
}

TEST(SegmentPlan, PiecesFollowTheThresholdAndTheBackend) {
  ReducerOptions o = Small();
  o.min_piece_bytes = 512;  // 4096 bytes for 8 gradients: just enough
  EXPECT_EQ(Describe(Plan(Specs(kCounts), o, kInProcess)), "PPI");
  EXPECT_EQ(Describe(Plan(Specs(kCounts), o, kOneNode)), "PPI");
  // A backend that does not reduce pieces, or the option off: copies.
  EXPECT_EQ(Describe(Plan(Specs(kCounts), o, kPointToPoint)), "CCI");
  o.reduce_in_pieces = false;
  EXPECT_EQ(Describe(Plan(Specs(kCounts), o, kInProcess)), "CCI");
}

TEST(SegmentPlan, ViewsGoReadyWhereRanksAgreeInTheCall) {
  ReducerOptions o = Small();
  o.gradient_as_bucket_view = true;
  const SegmentPlan ready = Plan(Specs(kCounts), o, kInProcess);
  EXPECT_EQ(Describe(ready), "RRR");
  EXPECT_EQ(ready.buckets[0].ready_first, 0);
  for (const SegmentMath& m : ready.buckets[0].math) EXPECT_EQ(m.op, RedOp::kAvg);
  // Point-to-point, or merging off: one all-reduce per segment, in place
  // where a segment is one gradient (a view there reduces its slot).
  EXPECT_EQ(Describe(Plan(Specs(kCounts), o, kPointToPoint)), "CCI");
  o.merge_ready_segments = false;
  EXPECT_EQ(Describe(Plan(Specs(kCounts), o, kInProcess)), "CCI");
}

// Buckets: 0 the bfloat16 gradient (visited first), 1 and 2 a float32
// gradient each (a 400-byte cap). Where parts cost nothing more the two
// float32 buckets make one chain; elsewhere each bucket is its own.
TEST(SegmentPlan, ReadyChainsRunOverBucketsOfOneDtype) {
  std::vector<GradSpec> grads = Specs({100, 100});
  grads.push_back({50, DataType::kBfloat16, MemKind::kHost, ""});
  ReducerOptions o = Small();
  o.gradient_as_bucket_view = true;
  o.bucket_cap_bytes = 400;
  const SegmentPlan chained = Plan(grads, o, kInProcess);
  ASSERT_EQ(chained.buckets.size(), 3u);
  EXPECT_EQ(Describe(chained), "R|R|R");
  EXPECT_EQ(chained.buckets[0].ready_first, 0);
  EXPECT_EQ(chained.buckets[1].ready_first, 1);
  EXPECT_EQ(chained.buckets[2].ready_first, 1);
  EXPECT_EQ(chained.buckets[2].ready_seg0, 1u);
  EXPECT_EQ(chained.buckets[2].ready_elem0, 100u);
  const SegmentPlan apart = Plan(grads, o, kOneNode);
  EXPECT_EQ(apart.buckets[2].ready_first, 2);
  EXPECT_EQ(apart.buckets[2].ready_seg0, 0u);
  EXPECT_EQ(apart.buckets[2].ready_elem0, 0u);
}

TEST(SegmentPlan, CudaBucketsAreOneDeviceSegment) {
  const SegmentPlan sp = Plan(Specs(kCounts), Small(), kCuda);
  EXPECT_EQ(Describe(sp), "D");
  EXPECT_EQ(sp.buckets[0].segs[0].end, 4872u);
  EXPECT_EQ(sp.buckets[0].seg_grads[0], 10);
  EXPECT_FLOAT_EQ(sp.buckets[0].math[0].scale_in, 0.25f);
}

// Compressed to float16: never in place or in pieces (the copies cast), and
// 1/sqrt(N) on both sides of the sum.
TEST(SegmentPlan, Float16CompressionCopiesWithSplitScaling) {
  ReducerOptions o = Small();
  o.comm_dtype = DataType::kFloat16;
  o.segment_bytes = 2048;  // 1024 halves
  const SegmentPlan sp = Plan(Specs(kCounts), o, kInProcess);
  const std::string d = Describe(sp);
  EXPECT_EQ(d.find_first_not_of('C'), std::string::npos) << d;
  EXPECT_EQ(d.size(), 5u) << d;  // 4872 halves in 1024-element segments, the large one cut too
  for (const SegmentMath& m : sp.buckets[0].math) {
    EXPECT_EQ(m.op, RedOp::kSum);
    EXPECT_FLOAT_EQ(m.scale_in, 0.5f);
    EXPECT_FLOAT_EQ(m.scale_out, 0.5f);
  }
}

}  // namespace
}  // namespace shard
}  // namespace weft

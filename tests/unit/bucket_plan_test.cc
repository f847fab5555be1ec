// Golden tests of the bucket plan (shard/bucket_plan.h), plus invariants
// checked on random gradient lists.
#include "shard/bucket_plan.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace shard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<GradSpec> Fp32(std::vector<size_t> counts) {
  std::vector<GradSpec> g;
  for (size_t c : counts) g.push_back({c, DataType::kFloat32, MemKind::kHost, ""});
  return g;
}

TEST(BucketPlan, ReverseOrderAlignedSlots) {
  auto plan = PlanBuckets(Fp32({3, 5, 2}), PlanOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 1u);
  const Bucket& b = plan->buckets[0];
  EXPECT_THAT(b.grads, ElementsAre(2, 1, 0));
  EXPECT_THAT(b.offsets, ElementsAre(0, 4, 12));  // 16-byte slots: 4 floats
  EXPECT_EQ(b.length, 15u);
  EXPECT_EQ(b.dtype, DataType::kFloat32);
  EXPECT_THAT(plan->bucket_of, ElementsAre(0, 0, 0));
  EXPECT_THAT(plan->slot_of, ElementsAre(2, 1, 0));
}

TEST(BucketPlan, FirstBucketSmallOversizedAlone) {
  PlanOptions o;
  o.first_bucket_cap_bytes = 64;
  o.bucket_cap_bytes = 128;
  // Visited 5,4,3,2,1,0. #5 (160 B) overflows the 64 B first bucket and sits
  // alone; #4..#1 fill a 128 B bucket exactly; #0 opens the third.
  auto plan = PlanBuckets(Fp32({8, 8, 8, 8, 8, 40}), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_THAT(plan->buckets[0].grads, ElementsAre(5));
  EXPECT_EQ(plan->buckets[0].length, 40u);
  EXPECT_THAT(plan->buckets[1].grads, ElementsAre(4, 3, 2, 1));
  EXPECT_THAT(plan->buckets[1].offsets, ElementsAre(0, 8, 16, 24));
  EXPECT_THAT(plan->buckets[2].grads, ElementsAre(0));
  EXPECT_THAT(plan->bucket_of, ElementsAre(2, 1, 1, 1, 1, 0));
}

TEST(BucketPlan, OverflowStartsNextBucket) {
  PlanOptions o;
  o.first_bucket_cap_bytes = 40;
  o.bucket_cap_bytes = 40;
  // Visited 2,1,0: #2 (16 B), #1 would end at 16+24=40 B: fits; #0 overflows.
  auto plan = PlanBuckets(Fp32({4, 6, 4}), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 2u);
  EXPECT_THAT(plan->buckets[0].grads, ElementsAre(2, 1));
  EXPECT_THAT(plan->buckets[0].offsets, ElementsAre(0, 4));
  EXPECT_THAT(plan->buckets[1].grads, ElementsAre(0));
}

TEST(BucketPlan, OneFamilyPerDtypeAndMemory) {
  std::vector<GradSpec> g = {
      {4, DataType::kFloat32, MemKind::kHost, "a"},
      {4, DataType::kFloat16, MemKind::kHost, "b"},
      {4, DataType::kFloat32, MemKind::kCuda, "c"},
      {4, DataType::kFloat16, MemKind::kHost, "d"},
      {4, DataType::kFloat32, MemKind::kHost, "e"},
  };
  auto plan = PlanBuckets(g, PlanOptions{});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Numbered by first visit: e (fp32 host), d (fp16 host), c (fp32 cuda).
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_THAT(plan->buckets[0].grads, ElementsAre(4, 0));
  EXPECT_THAT(plan->buckets[1].grads, ElementsAre(3, 1));
  EXPECT_THAT(plan->buckets[1].offsets, ElementsAre(0, 8));  // 16 B = 8 halves
  EXPECT_EQ(plan->buckets[1].dtype, DataType::kFloat16);
  EXPECT_THAT(plan->buckets[2].grads, ElementsAre(2));
  EXPECT_EQ(plan->buckets[2].memory, MemKind::kCuda);
}

TEST(BucketPlan, PaddingToWorldSize) {
  PlanOptions o;
  o.pad_multiple = 8;
  o.first_bucket_cap_bytes = 64;
  o.bucket_cap_bytes = 64;
  auto plan = PlanBuckets(Fp32({3, 13}), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 2u);
  EXPECT_EQ(plan->buckets[0].length, 16u);  // 13 -> 16
  EXPECT_EQ(plan->buckets[1].length, 8u);   // 3 -> 8
}

TEST(BucketPlan, CommDtypeChangesElementSizeAndCap) {
  PlanOptions o;
  o.comm_dtype = DataType::kBfloat16;
  o.first_bucket_cap_bytes = 32;
  o.bucket_cap_bytes = 32;
  std::vector<GradSpec> g = Fp32({5, 7, 2});
  g.push_back({3, DataType::kInt32, MemKind::kHost, ""});
  auto plan = PlanBuckets(g, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // int32 keeps its own type; floats are bf16: 2 B each, slots aligned to 8.
  ASSERT_EQ(plan->buckets.size(), 3u);
  EXPECT_EQ(plan->buckets[0].dtype, DataType::kInt32);
  EXPECT_THAT(plan->buckets[1].grads, ElementsAre(2, 1));
  EXPECT_THAT(plan->buckets[1].offsets, ElementsAre(0, 8));
  EXPECT_EQ(plan->buckets[1].dtype, DataType::kBfloat16);
  EXPECT_EQ(plan->buckets[1].bytes(), 30u);  // 15 bf16; #0 would end at 42 B
  EXPECT_THAT(plan->buckets[2].grads, ElementsAre(0));
}

TEST(BucketPlan, ExplicitOrder) {
  PlanOptions o;
  o.order = {1, 0, 3, 2};
  o.first_bucket_cap_bytes = 32;
  o.bucket_cap_bytes = 32;
  auto plan = PlanBuckets(Fp32({4, 4, 4, 4}), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 2u);
  EXPECT_THAT(plan->buckets[0].grads, ElementsAre(1, 0));
  EXPECT_THAT(plan->buckets[1].grads, ElementsAre(3, 2));
}

TEST(BucketPlan, RefusesBadInputsNamingThem) {
  PlanOptions o;
  o.order = {0, 0};
  auto s = PlanBuckets(Fp32({1, 2}), o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("order[1] = 0"));

  o = PlanOptions{};
  o.order = {0, 5};
  EXPECT_THAT(PlanBuckets(Fp32({1, 2}), o).status().message(), HasSubstr("order[1] = 5"));

  o = PlanOptions{};
  o.alignment_bytes = 12;
  EXPECT_THAT(PlanBuckets(Fp32({1}), o).status().message(), HasSubstr("alignment_bytes = 12"));

  o = PlanOptions{};
  o.bucket_cap_bytes = 0;
  EXPECT_THAT(PlanBuckets(Fp32({1}), o).status().message(), HasSubstr("bucket_cap_bytes = 0"));

  std::vector<GradSpec> g = {{1, static_cast<DataType>(42), MemKind::kHost, "fc.weight"}};
  EXPECT_THAT(PlanBuckets(g, PlanOptions{}).status().message(), HasSubstr("'fc.weight': dtype = 42"));
}

// Found by fuzz/structs_fuzz.cc: a gradient of 2^56 + 1 float32 elements
// passed the plan (its limit was 2^59 elements, not bytes) and the reducer
// then tried to allocate 2^58 bytes. Sizes past core/limits.h's 64 PiB are
// refused naming the gradient, and no cap or padding makes a bucket wrap.
TEST(BucketPlan, RefusesSizesPastAnyBuffer) {
  const size_t huge = (size_t{1} << 56) / 4 + 1;
  std::vector<GradSpec> g = {{huge, DataType::kFloat32, MemKind::kHost, "emb"}};
  auto s = PlanBuckets(g, PlanOptions{}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("gradient 'emb': count"));

  // Compressed to bfloat16 it would fit the bucket, but not its own buffer.
  PlanOptions o;
  o.comm_dtype = DataType::kBfloat16;
  EXPECT_EQ(PlanBuckets(g, o).status().code(), absl::StatusCode::kInvalidArgument);

  // Caps of SIZE_MAX: gradients of 2^53 float32 elements each would add up past
  // 2^64 bytes in one bucket; each bucket stays within 2^56 bytes instead.
  o = PlanOptions{};
  o.bucket_cap_bytes = o.first_bucket_cap_bytes = SIZE_MAX;
  auto plan = PlanBuckets(Fp32({size_t{1} << 53, size_t{1} << 53, size_t{1} << 53}), o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Bucket& b : plan->buckets) EXPECT_LE(b.bytes(), size_t{1} << 56);

  o = PlanOptions{};
  o.pad_multiple = SIZE_MAX;
  EXPECT_THAT(PlanBuckets(Fp32({3}), o).status().message(), HasSubstr("pad_multiple = "));
  o = PlanOptions{};
  o.pad_multiple = size_t{1} << 55;
  EXPECT_THAT(PlanBuckets(Fp32({3}), o).status().message(), HasSubstr("more than any buffer holds"));
}

TEST(BucketPlan, EmptyList) {
  auto plan = PlanBuckets({}, PlanOptions{});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->buckets.empty());
}

// Invariants on random lists: every gradient in exactly one slot; slots
// aligned, in bounds and disjoint; buckets under the cap unless they hold one
// gradient; buckets numbered by first visit; the same plan twice.
TEST(BucketPlan, RandomListsKeepInvariants) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 60)(rng);
    std::vector<GradSpec> g;
    for (int i = 0; i < n; ++i) {
      const DataType t = std::uniform_int_distribution<int>(0, 2)(rng) == 0 ? DataType::kFloat16 : DataType::kFloat32;
      g.push_back({std::uniform_int_distribution<size_t>(0, 3000)(rng), t, MemKind::kHost, ""});
    }
    PlanOptions o;
    o.first_bucket_cap_bytes = std::uniform_int_distribution<size_t>(16, 4096)(rng);
    o.bucket_cap_bytes = std::uniform_int_distribution<size_t>(16, 20000)(rng);
    o.pad_multiple = std::uniform_int_distribution<size_t>(1, 5)(rng);
    if (trial % 2 == 0) {
      o.order.resize(n);
      for (int i = 0; i < n; ++i) o.order[i] = i;
      std::shuffle(o.order.begin(), o.order.end(), rng);
    }
    auto plan = PlanBuckets(g, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    auto again = PlanBuckets(g, o);
    std::vector<int> position(n);
    for (int k = 0; k < n; ++k) position[o.order.empty() ? n - 1 - k : o.order[k]] = k;
    std::vector<int> seen(n, 0);
    int last_first = -1;
    for (size_t b = 0; b < plan->buckets.size(); ++b) {
      const Bucket& bk = plan->buckets[b];
      ASSERT_FALSE(bk.grads.empty());
      EXPECT_EQ(bk.grads, again->buckets[b].grads);
      EXPECT_EQ(bk.offsets, again->buckets[b].offsets);
      EXPECT_GT(position[bk.grads[0]], last_first);
      last_first = position[bk.grads[0]];
      EXPECT_EQ(bk.length % o.pad_multiple, 0u);
      const size_t es = ElementSize(bk.dtype);
      size_t end = 0;
      for (size_t s = 0; s < bk.grads.size(); ++s) {
        const int gi = bk.grads[s];
        ++seen[gi];
        EXPECT_EQ(g[gi].dtype, bk.dtype);
        EXPECT_EQ((bk.offsets[s] * es) % 16, 0u);
        EXPECT_GE(bk.offsets[s], end);
        end = bk.offsets[s] + g[gi].count;
        EXPECT_EQ(plan->bucket_of[gi], static_cast<int>(b));
        EXPECT_EQ(plan->slot_of[gi], static_cast<int>(s));
        if (s > 0) {
          EXPECT_GT(position[gi], position[bk.grads[s - 1]]);
        }
      }
      EXPECT_LE(end, bk.length);
      if (bk.grads.size() > 1) {
        EXPECT_LE(end * es, std::max(o.bucket_cap_bytes, o.first_bucket_cap_bytes));
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "gradient " << i;
  }
}

std::vector<std::pair<size_t, size_t>> Ranges(const std::vector<Segment>& segs) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const Segment& s : segs) out.emplace_back(s.begin, s.end);
  return out;
}

// Golden: slots at 0 (3), 4 (30, whole), 36 (5), 44 (2, whole but under the
// target), 48 (25, not whole), 76 (0), 76 (12, whole), padded to 100; target 10.
TEST(CutSegments, WholeLargeSlotsAloneTheRestCutEveryTarget) {
  Bucket bk;
  bk.offsets = {0, 4, 36, 44, 48, 76, 76};
  bk.grads = {0, 1, 2, 3, 4, 5, 6};
  bk.length = 100;
  const std::vector<size_t> counts = {3, 30, 5, 2, 25, 0, 12};
  const std::vector<bool> whole = {true, true, false, true, false, true, true};
  using P = std::pair<size_t, size_t>;
  EXPECT_THAT(Ranges(CutSegments(bk, counts, 10, whole)),
              ElementsAre(P{0, 3},     // the run before a whole slot ends there
                          P{4, 34},    // whole and >= target: alone, however large
                          P{36, 46},   // a run over a gap, with the small whole slot in it
                          P{48, 58}, P{58, 68}, P{68, 73},  // a large slot that is not whole: cut
                          P{76, 88})); // whole; the padding after it is in no segment
  // Nothing whole: every target elements from the first slot, as cache-sized pieces.
  EXPECT_THAT(Ranges(CutSegments(bk, counts, 40, std::vector<bool>(7, false))),
              ElementsAre(P{0, 40}, P{40, 80}, P{80, 88}));
  // Each slot's elements lie in segments, and segments ascend without overlapping.
  for (size_t target : {1, 3, 7, 10, 29, 30, 31, 1000}) {
    const std::vector<Segment> segs = CutSegments(bk, counts, target, whole);
    for (size_t k = 0; k < segs.size(); ++k) {
      EXPECT_LT(segs[k].begin, segs[k].end);
      if (k > 0) {
        EXPECT_LE(segs[k - 1].end, segs[k].begin);
      }
      if (target < 30 && segs[k].begin == 4) {
        EXPECT_EQ(segs[k].end, 34u) << "target " << target;
      }
    }
    for (size_t s = 0; s < counts.size(); ++s) {
      for (size_t e = bk.offsets[s]; e < bk.offsets[s] + counts[s]; ++e) {
        const bool covered = std::any_of(segs.begin(), segs.end(),
                                          [e](const Segment& g) { return g.begin <= e && e < g.end; });
        EXPECT_TRUE(covered) << "element " << e << " of slot " << s << ", target " << target;
      }
    }
  }
}

}  // namespace
}  // namespace shard
}  // namespace weft

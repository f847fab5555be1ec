// The reducer over in-process ranks (threads): averages, bucket order under
// random arrival orders, rebuild, gradient-as-bucket-view, no_sync, find-
// unused, static graph, compression, errors and the cross-rank plan check.
//
// Inputs are small integers so that every sum and every division by the
// (power-of-two) world size is exact: results are compared bit for bit.
#include "shard/reducer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "comm/inproc/comm.h"
#include "core/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace shard {
namespace {

using ::testing::HasSubstr;

constexpr int kTimeoutMs = 20000;  // a hang fails instead of blocking CI

void RunRanks(int n, const std::function<void(int, Communicator&)>& body) {
  CommOptions o;
  o.timeout_ms = kTimeoutMs;
  auto comms = inproc::InitInProcess(n, o);
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { body(r, *(*comms)[r]); });
  for (auto& t : threads) t.join();
}

std::vector<GradSpec> Specs(const std::vector<size_t>& counts) {
  std::vector<GradSpec> g;
  for (size_t i = 0; i < counts.size(); ++i) {
    g.push_back({counts[i], DataType::kFloat32, MemKind::kHost, "layer" + std::to_string(i) + ".weight"});
  }
  return g;
}

const std::vector<size_t> kCounts = {7, 0, 1, 300, 33, 1000, 5, 64, 129, 2, 777, 16};

// Value of element j of gradient g on rank r in step s: an integer in [-8, 8].
float Value(int s, int r, int g, size_t j) { return static_cast<float>(static_cast<int>((s * 7 + r * 5 + g * 3 + j) % 17) - 8); }

ReducerOptions SmallBuckets() {
  ReducerOptions o;
  o.first_bucket_cap_bytes = 256;
  o.bucket_cap_bytes = 2048;
  o.segment_bytes = 200;  // buckets run in several pieces that cut through gradients
  return o;
}

// One backward on one rank: fill grads with Value(), mark them from two
// threads in a rank-specific random order, finalize, check the average.
void Backward(Reducer& red, int step, int rank, std::vector<std::vector<float>>& grads,
              const std::vector<int>& skip = {}) {
  const int n = static_cast<int>(grads.size());
  std::vector<int> order;
  for (int g = 0; g < n; ++g) {
    for (size_t j = 0; j < grads[g].size(); ++j) grads[g][j] = Value(step, rank, g, j);
    if (std::find(skip.begin(), skip.end(), g) == skip.end()) order.push_back(g);
  }
  std::mt19937 rng(step * 100 + rank);
  std::shuffle(order.begin(), order.end(), rng);
  std::thread other([&] {
    for (size_t k = 1; k < order.size(); k += 2) EXPECT_TRUE(red.MarkReady(order[k], grads[order[k]].data(), nullptr).ok());
  });
  for (size_t k = 0; k < order.size(); k += 2) EXPECT_TRUE(red.MarkReady(order[k], grads[order[k]].data(), nullptr).ok());
  other.join();
}

float Mean(int step, int world, int g, size_t j) {
  double sum = 0;
  for (int r = 0; r < world; ++r) sum += Value(step, r, g, j);
  return static_cast<float>(sum / world);
}

class ReducerWorld : public ::testing::TestWithParam<int> {};

TEST_P(ReducerWorld, AveragesInAnyArrivalOrderAcrossRebuild) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    auto red = Reducer::Create(&comm, Specs(kCounts), SmallBuckets());
    ASSERT_TRUE(red.ok()) << red.status();
    EXPECT_GT((*red)->num_buckets(), 3);
    std::vector<std::vector<float>> grads;
    for (size_t c : kCounts) grads.emplace_back(c);
    int64_t launched = 0;
    for (int step = 0; step < 4; ++step) {
      launched += (*red)->num_buckets();  // the plan may change after step 0
      Backward(**red, step, rank, grads);
      ASSERT_TRUE((*red)->Finalize(nullptr).ok());
      for (size_t g = 0; g < grads.size(); ++g) {
        for (size_t j = 0; j < grads[g].size(); ++j) {
          ASSERT_EQ(grads[g][j], Mean(step, world, g, j)) << "rank " << rank << " step " << step << " grad " << g;
        }
      }
    }
    // Rank 0's random first order differs from reverse registration order.
    EXPECT_EQ((*red)->layout_version(), 1);
    EXPECT_EQ((*red)->stats().buckets_launched, launched);
    // Gradients this small (7 to 777 elements, pieces well under the default
    // min_piece_bytes) go through the copy plans, not in pieces.
    EXPECT_EQ((*red)->stats().segments_in_pieces, 0);
  });
}

TEST_P(ReducerWorld, GradientAsBucketView) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    ReducerOptions o = SmallBuckets();
    o.gradient_as_bucket_view = true;
    o.min_piece_bytes = 0;  // would allow pieces; views never take them
    auto red = Reducer::Create(&comm, Specs(kCounts), o);
    ASSERT_TRUE(red.ok()) << red.status();
    Reducer& r = **red;
    for (int step = 0; step < 3; ++step) {
      std::vector<float*> views;
      for (size_t g = 0; g < kCounts.size(); ++g) views.push_back(static_cast<float*>(*r.GradSlot(g)));
      if (step == 1) {  // the rebuild carried the last averages over
        for (size_t g = 0; g < kCounts.size(); ++g) {
          for (size_t j = 0; j < kCounts[g]; ++j) ASSERT_EQ(views[g][j], Mean(0, world, g, j));
        }
      }
      std::vector<int> order(kCounts.size());
      for (size_t g = 0; g < order.size(); ++g) order[g] = g;
      std::shuffle(order.begin(), order.end(), std::mt19937(step + 10 * rank));
      for (int g : order) {
        for (size_t j = 0; j < kCounts[g]; ++j) views[g][j] = Value(step, rank, g, j);
        ASSERT_TRUE(r.MarkReady(g, views[g], nullptr).ok());
      }
      ASSERT_TRUE(r.Finalize(nullptr).ok());
      // The first Finalize rebuilds the buckets: views are fetched afresh.
      for (size_t g = 0; g < kCounts.size(); ++g) {
        const float* v = static_cast<float*>(*r.GradSlot(g));
        for (size_t j = 0; j < kCounts[g]; ++j) ASSERT_EQ(v[j], Mean(step, world, g, j));
      }
    }
    EXPECT_EQ(r.stats().segments_in_pieces, 0) << "views are the bucket: one contiguous call per segment";
  });
}

// Views on in-process ranks, which settle what is ready within the call
// (ReducerOptions::merge_ready_segments) and chain the buckets of one dtype
// into one ready buffer (DirectReduce::ReducesReadyParts): gradients marked
// in registration order hold every bucket back until the last mark (bucket
// 0 holds the last gradient), so every segment is ready before the first is
// enqueued and the whole backward goes in the first segment's call, on
// every rank: exactly segments - 1 merged. In step 1 rank 0 passes
// gradient 3 (the second segment of its bucket) in a buffer of its own,
// which is copied in on the comm stream, so its segment fills only then,
// after the first call has run: that call stops before it on every rank,
// and the averages must hold all the same. In step 2 (views again) it is
// one call again. Off, nothing merges.
TEST_P(ReducerWorld, ViewSegmentsThatAreReadyMerge) {
  const int world = GetParam();
  for (bool merge : {true, false}) {
    RunRanks(world, [&](int rank, Communicator& comm) {
      ReducerOptions o = SmallBuckets();
      o.gradient_as_bucket_view = true;
      o.rebuild_buckets = false;
      o.merge_ready_segments = merge;
      auto red = Reducer::Create(&comm, Specs(kCounts), o);
      ASSERT_TRUE(red.ok()) << red.status();
      Reducer& r = **red;
      std::vector<float> own(kCounts[3]);
      for (int step = 0; step < 3; ++step) {
        const ReducerStats before = r.stats();
        const bool copy = step == 1 && rank == 0;
        std::vector<float*> grad;
        for (size_t g = 0; g < kCounts.size(); ++g) {
          grad.push_back(copy && g == 3 ? own.data() : static_cast<float*>(*r.GradSlot(g)));
          for (size_t j = 0; j < kCounts[g]; ++j) grad[g][j] = Value(step, rank, g, j);
        }
        for (size_t g = 0; g < kCounts.size(); ++g) ASSERT_TRUE(r.MarkReady(g, grad[g], nullptr).ok());
        ASSERT_TRUE(r.Finalize(nullptr).ok());
        for (size_t g = 0; g < kCounts.size(); ++g) {
          for (size_t j = 0; j < kCounts[g]; ++j) {
            ASSERT_EQ(grad[g][j], Mean(step, world, g, j)) << "rank " << rank << " step " << step << " grad " << g;
          }
        }
        const ReducerStats after = r.stats();
        const int64_t segments = after.segments_launched - before.segments_launched;
        const int64_t buckets = after.buckets_launched - before.buckets_launched;
        const int64_t merged = after.segments_merged - before.segments_merged;
        EXPECT_GT(segments, buckets + 3) << "the test wants buckets of several segments";
        if (!merge) {
          EXPECT_EQ(merged, 0);
        } else if (step != 1) {
          EXPECT_EQ(merged, segments - 1) << "rank " << rank << " step " << step;
        } else {
          EXPECT_LT(merged, segments - 1) << "gradient 3's copy-in comes after the first call";
        }
      }
    });
  }
}

// Buckets chain only within a dtype: with float32 and float64 gradients
// the buckets come in two families, and every segment ready before the
// first call makes one call per run of same-dtype buckets in bucket order.
TEST_P(ReducerWorld, ReadyBucketsChainWithinADtype) {
  const int world = GetParam();
  RunRanks(world, [&](int rank, Communicator& comm) {
    std::vector<GradSpec> specs = Specs(kCounts);
    for (size_t g = 0; g < specs.size(); g += 3) specs[g].dtype = DataType::kFloat64;
    ReducerOptions o = SmallBuckets();
    o.gradient_as_bucket_view = true;
    o.rebuild_buckets = false;
    auto red = Reducer::Create(&comm, specs, o);
    ASSERT_TRUE(red.ok()) << red.status();
    Reducer& r = **red;
    int runs = 0;  // of same-dtype buckets, in bucket order
    for (int b = 0; b < r.num_buckets(); ++b) {
      if (b == 0 || *r.bucket_dtype(b) != *r.bucket_dtype(b - 1)) ++runs;
    }
    EXPECT_FALSE(r.bucket_dtype(r.num_buckets()).ok());
    EXPECT_GT(runs, 1) << "the test wants buckets of both dtypes";
    for (int step = 0; step < 2; ++step) {
      const ReducerStats before = r.stats();
      for (size_t g = 0; g < specs.size(); ++g) {
        void* slot = *r.GradSlot(g);
        for (size_t j = 0; j < specs[g].count; ++j) {
          const float v = Value(step, rank, g, j);
          if (specs[g].dtype == DataType::kFloat64) static_cast<double*>(slot)[j] = v;
          else static_cast<float*>(slot)[j] = v;
        }
      }
      for (size_t g = 0; g < specs.size(); ++g) ASSERT_TRUE(r.MarkReady(g, *r.GradSlot(g), nullptr).ok());
      ASSERT_TRUE(r.Finalize(nullptr).ok());
      for (size_t g = 0; g < specs.size(); ++g) {
        const void* slot = *r.GradSlot(g);
        for (size_t j = 0; j < specs[g].count; ++j) {
          if (specs[g].dtype == DataType::kFloat32) {
            ASSERT_EQ(static_cast<const float*>(slot)[j], Mean(step, world, g, j))
                << "rank " << rank << " step " << step << " grad " << g;
            continue;
          }
          double sum = 0;
          for (int q = 0; q < world; ++q) sum += Value(step, q, g, j);
          ASSERT_NEAR(static_cast<const double*>(slot)[j], sum / world, 1e-12 * (1 + std::abs(sum)))
              << "rank " << rank << " step " << step << " grad " << g;
        }
      }
      const ReducerStats after = r.stats();
      const int64_t segments = after.segments_launched - before.segments_launched;
      const int64_t merged = after.segments_merged - before.segments_merged;
      EXPECT_EQ(segments - merged, runs) << "rank " << rank << " step " << step;
    }
  });
}

// The copy plans a segment keeps (shard/reducer_state.h, SegmentCopies), and
// the segments averaged inside a gradient, belong to the gradient buffers
// they were made for; frameworks may hand new buffers any step
// (zero_grad(set_to_none=True)). Per step, gradient g lives
// in buffer A or B: steps 0-1 A (the plans are reused), step 2 B, steps 3-5
// A for odd g and B for even g, with gradient 3 unused on every rank in step
// 4 (its slot is zero-filled and its buffer left alone). Before each step the
// buffers not in use are poisoned: a stale plan would read the poison into
// the sum or write the average into the wrong buffer. The same with
// segments reduced in pieces where the gradients lie (in-process ranks
// read each other's buffers: a stale pointer would read poison too).
TEST_P(ReducerWorld, CopyPlansFollowGradientBuffersThatMove) {
  const int world = GetParam();
  const std::optional<DataType> bf16 = DataType::kBfloat16, own;
  for (const auto& [comm_dtype, pieces] : {std::pair{own, false}, std::pair{own, true}, std::pair{bf16, false},
                                           std::pair{bf16, true}}) {
    RunRanks(world, [&](int rank, Communicator& comm) {
      ReducerOptions o = SmallBuckets();
      o.rebuild_buckets = false;  // one layout throughout: only the buffers move
      o.comm_dtype = comm_dtype;
      o.reduce_in_pieces = pieces;
      o.min_piece_bytes = 0;  // these gradients are tiny
      const bool plans_used = !pieces || comm_dtype.has_value();  // compression needs the copies
      auto red = Reducer::Create(&comm, Specs(kCounts), o);
      ASSERT_TRUE(red.ok()) << red.status();
      Reducer& r = **red;
      const int n = static_cast<int>(kCounts.size());
      std::vector<std::vector<float>> a, b;
      for (size_t c : kCounts) a.emplace_back(c), b.emplace_back(c);
      auto in_a = [](int step, int g) { return step < 2 || (step > 2 && g % 2 == 1); };
      auto poison = [](size_t j) { return 4096.0f + static_cast<float>(j); };
      int64_t plans = 0;
      for (int step = 0; step < 6; ++step) {
        const bool skip3 = step == 4;
        std::vector<int> order;
        for (int g = 0; g < n; ++g) {
          std::vector<float>& mine = in_a(step, g) ? a[g] : b[g];
          std::vector<float>& other = in_a(step, g) ? b[g] : a[g];
          for (size_t j = 0; j < kCounts[g]; ++j) mine[j] = Value(step, rank, g, j), other[j] = poison(j);
          if (!(skip3 && g == 3)) order.push_back(g);
        }
        if (skip3) {
          ASSERT_TRUE(r.MarkUnused(3).ok());
        }
        std::shuffle(order.begin(), order.end(), std::mt19937(step * 10 + rank));
        for (int g : order) ASSERT_TRUE(r.MarkReady(g, (in_a(step, g) ? a[g] : b[g]).data(), nullptr).ok());
        ASSERT_TRUE(r.Finalize(nullptr).ok());
        for (int g = 0; g < n; ++g) {
          const std::vector<float>& mine = in_a(step, g) ? a[g] : b[g];
          const std::vector<float>& other = in_a(step, g) ? b[g] : a[g];
          for (size_t j = 0; j < kCounts[g]; ++j) {
            ASSERT_EQ(other[j], poison(j)) << "step " << step << " grad " << g << ": a stale buffer was touched";
            const float want = skip3 && g == 3 ? Value(step, rank, g, j) : Mean(step, world, g, j);
            ASSERT_EQ(mine[j], want) << "rank " << rank << " step " << step << " grad " << g << " element " << j;
          }
        }
        // Plans are made in step 0, reused in step 1 (same buffers), remade in step 2.
        const int64_t built = r.stats().copy_plans_built;
        if (!plans_used) {
          EXPECT_EQ(built, 0) << "segments in pieces need no copy plans";
        } else if (step == 0) {
          EXPECT_GT(built, 0);
        } else if (step == 1) {
          EXPECT_EQ(built, plans) << "the same buffers in step 1 should reuse step 0's plans";
        } else if (step == 2) {
          EXPECT_GT(built, plans);
        }
        plans = built;
      }
      // Segments inside gradients 3, 5 and 10 are averaged there (in place)
      // unless the bucket is bfloat16 (compression needs the copies).
      if (comm_dtype) {
        EXPECT_EQ(r.stats().segments_in_place, 0);
      } else {
        EXPECT_GT(r.stats().segments_in_place, 0);
      }
      EXPECT_EQ(r.stats().segments_in_pieces > 0, !plans_used);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ReducerWorld, ::testing::Values(1, 2, 4));

// Segments inside one gradient are averaged there (in place) with the
// bucket's op for every floating dtype, not only float32: float64, float16
// and bfloat16 gradients, each family in buckets of its own, with segments
// (200 bytes) both inside gradients and straddling them. Inputs are chosen
// so every average is exact in its type.
TEST(Reducer, InPlaceSegmentsForEveryDtype) {
  constexpr int kWorld = 4;
  RunRanks(kWorld, [&](int rank, Communicator& comm) {
    const std::vector<DataType> types = {DataType::kFloat64, DataType::kFloat16, DataType::kBfloat16,
                                         DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16};
    const std::vector<size_t> counts = {300, 400, 500, 7, 3, 90};
    std::vector<GradSpec> specs;
    for (size_t g = 0; g < types.size(); ++g) specs.push_back({counts[g], types[g], MemKind::kHost, std::string()});
    auto red = Reducer::Create(&comm, specs, SmallBuckets());
    ASSERT_TRUE(red.ok()) << red.status();
    // Element j of gradient g as a double, before the type's encoding.
    auto value = [](int step, int r, int g, size_t j, DataType) { return Value(step, r, g, j); };
    std::vector<std::vector<unsigned char>> bufs;
    for (size_t g = 0; g < types.size(); ++g) bufs.emplace_back(counts[g] * ElementSize(types[g]));
    auto put = [&](size_t g, size_t j, double v) {
      unsigned char* p = bufs[g].data() + j * ElementSize(types[g]);
      if (types[g] == DataType::kFloat64) std::memcpy(p, &v, 8);
      if (types[g] == DataType::kFloat32) { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); }
      if (types[g] == DataType::kFloat16) { const uint16_t h = FloatToHalf(static_cast<float>(v)); std::memcpy(p, &h, 2); }
      if (types[g] == DataType::kBfloat16) { const uint16_t h = FloatToBf16(static_cast<float>(v)); std::memcpy(p, &h, 2); }
    };
    auto get = [&](size_t g, size_t j) -> double {
      const unsigned char* p = bufs[g].data() + j * ElementSize(types[g]);
      double d = 0;
      float f = 0;
      uint16_t h = 0;
      switch (types[g]) {
        case DataType::kFloat64: std::memcpy(&d, p, 8); return d;
        case DataType::kFloat32: std::memcpy(&f, p, 4); return f;
        case DataType::kFloat16: std::memcpy(&h, p, 2); return HalfToFloat(h);
        default: std::memcpy(&h, p, 2); return Bf16ToFloat(h);
      }
    };
    for (int step = 0; step < 3; ++step) {
      std::vector<int> order;
      for (size_t g = 0; g < types.size(); ++g) {
        for (size_t j = 0; j < counts[g]; ++j) put(g, j, value(step, rank, g, j, types[g]));
        order.push_back(static_cast<int>(g));
      }
      std::shuffle(order.begin(), order.end(), std::mt19937(step * 10 + rank));
      for (int g : order) ASSERT_TRUE((*red)->MarkReady(g, bufs[g].data(), nullptr).ok());
      ASSERT_TRUE((*red)->Finalize(nullptr).ok());
      for (size_t g = 0; g < types.size(); ++g) {
        for (size_t j = 0; j < counts[g]; ++j) {
          double sum = 0;
          for (int r = 0; r < kWorld; ++r) sum += value(step, r, g, j, types[g]);
          ASSERT_EQ(get(g, j), sum / kWorld) << Name(types[g]) << " grad " << g << " element " << j << " step " << step;
        }
      }
    }
    EXPECT_GT((*red)->stats().segments_in_place, 0);
  });
}

TEST(Reducer, NoSyncAccumulatesThenReducesTheSum) {
  RunRanks(4, [&](int rank, Communicator& comm) {
    auto red = Reducer::Create(&comm, Specs(kCounts), SmallBuckets());
    ASSERT_TRUE(red.ok()) << red.status();
    std::vector<std::vector<float>> grads, acc;
    for (size_t c : kCounts) grads.emplace_back(c), acc.emplace_back(c, 0.0f);
    ASSERT_TRUE((*red)->SetSync(false).ok());
    for (int step = 0; step < 2; ++step) {  // the framework accumulates into acc
      Backward(**red, step, rank, grads);
      ASSERT_TRUE((*red)->Finalize(nullptr).ok());
      for (size_t g = 0; g < grads.size(); ++g) {
        for (size_t j = 0; j < grads[g].size(); ++j) acc[g][j] += grads[g][j];
      }
    }
    EXPECT_EQ((*red)->stats().buckets_launched, 0);
    ASSERT_TRUE((*red)->SetSync(true).ok());
    for (size_t g = 0; g < grads.size(); ++g) {
      for (size_t j = 0; j < grads[g].size(); ++j) acc[g][j] += Value(2, rank, g, j);
    }
    for (size_t g = 0; g < acc.size(); ++g) ASSERT_TRUE((*red)->MarkReady(g, acc[g].data(), nullptr).ok());
    ASSERT_TRUE((*red)->Finalize(nullptr).ok());
    for (size_t g = 0; g < acc.size(); ++g) {
      for (size_t j = 0; j < acc[g].size(); ++j) {
        double sum = 0;
        for (int r = 0; r < 4; ++r) sum += Value(0, r, g, j) + Value(1, r, g, j) + Value(2, r, g, j);
        ASSERT_EQ(acc[g][j], static_cast<float>(sum / 4));
      }
    }
  });
}

// Rank r leaves gradient g unused when (g + r) % 3 == 0; gradient 4 is unused everywhere.
bool UsedOn(int g, int r) { return g != 4 && (g + r) % 3 != 0; }

TEST(Reducer, FindUnusedAveragesWithZerosAndReportsUse) {
  for (bool view : {false, true}) {
    RunRanks(4, [&](int rank, Communicator& comm) {
      ReducerOptions o = SmallBuckets();
      o.find_unused = true;
      o.gradient_as_bucket_view = view;
      auto red = Reducer::Create(&comm, Specs(kCounts), o);
      ASSERT_TRUE(red.ok()) << red.status();
      Reducer& r = **red;
      const int n = static_cast<int>(kCounts.size());
      std::vector<std::vector<float>> own;
      for (size_t c : kCounts) own.emplace_back(c);
      std::vector<float*> ptr(n);
      for (int g = 0; g < n; ++g) ptr[g] = view ? static_cast<float*>(*r.GradSlot(g)) : own[g].data();
      for (size_t j = 0; j < kCounts[4]; ++j) ptr[4][j] = 100.0f + j;  // unused everywhere: must survive
      for (int g = 0; g < n; ++g) {
        if (g == 4) continue;
        for (size_t j = 0; j < kCounts[g]; ++j) ptr[g][j] = Value(0, rank, g, j);
        if (!UsedOn(g, rank) && g % 2 == 0) {
          ASSERT_TRUE(r.MarkUnused(g).ok());  // explicitly; odd ones are left for Finalize to find
        } else if (UsedOn(g, rank)) {
          ASSERT_TRUE(r.MarkReady(g, ptr[g], nullptr).ok());
        }
      }
      const absl::Status finalized = r.Finalize(nullptr);
      ASSERT_TRUE(finalized.ok()) << finalized;
      for (int g = 0; g < n; ++g) {
        bool any = false;
        for (int q = 0; q < 4; ++q) any = any || UsedOn(g, q);
        EXPECT_EQ(*r.GradUsed(g), any) << g;
        // Used here: in the gradient (a view's slot may have moved in the
        // rebuild); unused here but used elsewhere: only in the slot.
        const float* got = (UsedOn(g, rank) && !view) ? ptr[g] : static_cast<float*>(*r.GradSlot(g));
        for (size_t j = 0; j < kCounts[g]; ++j) {
          if (g == 4) {
            if (view) {
              ASSERT_EQ(got[j], 100.0f + j);
            }
            continue;
          }
          double sum = 0;
          for (int q = 0; q < 4; ++q) sum += UsedOn(g, q) ? Value(0, q, g, j) : 0.0;
          ASSERT_EQ(got[j], static_cast<float>(sum / 4)) << "view " << view << " grad " << g;
        }
      }
    });
  }
}

TEST(Reducer, StaticGraphCountsRepeatedMarks) {
  RunRanks(2, [&](int rank, Communicator& comm) {
    ReducerOptions o = SmallBuckets();
    o.static_graph = true;
    auto red = Reducer::Create(&comm, Specs(kCounts), o);
    ASSERT_TRUE(red.ok()) << red.status();
    std::vector<std::vector<float>> grads;
    for (size_t c : kCounts) grads.emplace_back(c);
    for (int step = 0; step < 3; ++step) {
      // Gradient 3 is recomputed (checkpointing): marked with a partial value first.
      for (size_t j = 0; j < kCounts[3]; ++j) grads[3][j] = 1000.0f;
      ASSERT_TRUE((*red)->MarkReady(3, grads[3].data(), nullptr).ok());
      Backward(**red, step, rank, grads, {});
      ASSERT_TRUE((*red)->Finalize(nullptr).ok());
      for (size_t g = 0; g < grads.size(); ++g) {
        for (size_t j = 0; j < grads[g].size(); ++j) ASSERT_EQ(grads[g][j], Mean(step, 2, g, j));
      }
    }
    // A third mark is more than the first backward made.
    for (int k = 0; k < 2; ++k) ASSERT_TRUE((*red)->MarkReady(3, grads[3].data(), nullptr).ok());
    auto s = (*red)->MarkReady(3, grads[3].data(), nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("'layer3.weight' was marked ready 3 times"));
    red->reset();  // may have launched a bucket reading grads: wait for it while grads live
  });
}

TEST(Reducer, RefusedCallsChangeNothing) {
  RunRanks(2, [&](int rank, Communicator& comm) {
    auto red = Reducer::Create(&comm, Specs(kCounts), SmallBuckets());
    ASSERT_TRUE(red.ok()) << red.status();
    Reducer& r = **red;
    std::vector<std::vector<float>> grads;
    for (size_t c : kCounts) grads.emplace_back(c);
    Backward(r, 0, rank, grads, {5, 9});
    auto s = r.Finalize(nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("2 of 12 gradients were never marked ready"));
    EXPECT_THAT(s.message(), HasSubstr("'layer5.weight', 'layer9.weight'"));
    std::vector<float> other(kCounts[0], 555.0f);
    s = r.MarkReady(0, other.data(), nullptr);  // a second mark: refused, the first stands
    EXPECT_THAT(s.message(), HasSubstr("'layer0.weight' was marked ready twice"));
    EXPECT_FALSE(r.SetSync(false).ok());  // mid-backward
    EXPECT_FALSE(r.MarkReady(99, other.data(), nullptr).ok());
    EXPECT_THAT(r.MarkUnused(1).message(), HasSubstr("already marked ready"));
    ASSERT_TRUE(r.MarkReady(5, grads[5].data(), nullptr).ok());
    ASSERT_TRUE(r.MarkReady(9, grads[9].data(), nullptr).ok());
    ASSERT_TRUE(r.Finalize(nullptr).ok());
    for (size_t g = 0; g < grads.size(); ++g) {
      for (size_t j = 0; j < grads[g].size(); ++j) ASSERT_EQ(grads[g][j], Mean(0, 2, g, j));
    }
    EXPECT_EQ(other[0], 555.0f);
  });
}

// Gradients in each other's memory. Two of one segment (0 and 2 share one
// with these small buckets) would be averaged twice, in pieces perhaps by
// two threads at once: Finalize reports it on the rank that did it, whose
// share of that segment is then its bucket's stale slots; the collectives
// still run (the segment's, and the first Finalize's bucket rebuild) so the
// peers finish, every other segment is right, and the next backward with
// proper memory is right everywhere. A gradient inside a bucket but not at
// its own slot is refused at MarkReady, changing nothing. In pieces and
// through the copies (whose copy-out refuses overlapping destinations).
TEST(Reducer, GradientsThatShareMemoryAreReported) {
  for (bool pieces : {true, false}) {
    RunRanks(2, [&](int rank, Communicator& comm) {
      ReducerOptions o = SmallBuckets();
      o.reduce_in_pieces = pieces;
      o.min_piece_bytes = 0;  // these gradients are tiny
      auto red = Reducer::Create(&comm, Specs(kCounts), o);
      ASSERT_TRUE(red.ok()) << red.status();
      Reducer& r = **red;
      std::vector<std::vector<float>> grads;
      for (size_t c : kCounts) grads.emplace_back(c);
      for (int step = 0; step < 2; ++step) {
        for (size_t g = 0; g < kCounts.size(); ++g) {
          for (size_t j = 0; j < kCounts[g]; ++j) grads[g][j] = Value(step, rank, g, j);
        }
        const bool bad = step == 0 && rank == 0;
        if (step == 0) {
          const absl::Status s = r.MarkReady(7, *r.GradSlot(5), nullptr);
          EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
          EXPECT_THAT(s.message(), HasSubstr("of gradient 'layer7.weight' lies in the reducer's bucket memory but "
                                             "is not its own slot"));
        }
        for (int g = 0; g < static_cast<int>(kCounts.size()); ++g) {
          float* p = bad && g == 2 ? grads[0].data() + 3 : grads[g].data();  // 2 (1 element) inside 0 (7)
          ASSERT_TRUE(r.MarkReady(g, p, nullptr).ok()) << g;
        }
        const absl::Status done = r.Finalize(nullptr);
        if (bad) {
          EXPECT_EQ(done.code(), absl::StatusCode::kInvalidArgument) << done;
          EXPECT_THAT(done.message(), HasSubstr(pieces ? "gradient 'layer0.weight' and gradient 'layer2.weight' overlap in memory"
                                                       : "overlaps"));
        } else {
          ASSERT_TRUE(done.ok()) << "rank " << rank << " step " << step << ": " << done;
        }
        for (size_t g = 0; g < grads.size(); ++g) {
          if (step == 0 && g <= 2) continue;  // the segment rank 0 could not contribute to
          for (size_t j = 0; j < kCounts[g]; ++j) ASSERT_EQ(grads[g][j], Mean(step, 2, g, j)) << g;
        }
      }
    });
  }
}

TEST(Reducer, CompressionBf16AndFp16) {
  for (DataType t : {DataType::kBfloat16, DataType::kFloat16}) {
    RunRanks(4, [&](int rank, Communicator& comm) {
      ReducerOptions o = SmallBuckets();
      o.comm_dtype = t;
      auto red = Reducer::Create(&comm, Specs(kCounts), o);
      ASSERT_TRUE(red.ok()) << red.status();
      std::vector<std::vector<float>> grads;
      for (size_t c : kCounts) grads.emplace_back(c);
      Backward(**red, 0, rank, grads);
      ASSERT_TRUE((*red)->Finalize(nullptr).ok());
      // Integers up to 32 in magnitude, halved twice: exact in both types.
      for (size_t g = 0; g < grads.size(); ++g) {
        for (size_t j = 0; j < grads[g].size(); ++j) ASSERT_EQ(grads[g][j], Mean(0, 4, g, j)) << Name(t);
      }
    });
  }
}

TEST(Reducer, Fp16SqrtSplitAvoidsOverflow) {
  RunRanks(4, [&](int rank, Communicator& comm) {
    ReducerOptions o;
    o.comm_dtype = DataType::kFloat16;
    auto red = Reducer::Create(&comm, Specs({64}), o);
    ASSERT_TRUE(red.ok()) << red.status();
    // 4 x 20000 = 80000 overflows float16 (max 65504) if summed unscaled;
    // halved first (1/sqrt(4)), the sum is 40048.
    std::vector<float> g(64, 20000.0f + 16.0f * rank);
    ASSERT_TRUE((*red)->MarkReady(0, g.data(), nullptr).ok());
    ASSERT_TRUE((*red)->Finalize(nullptr).ok());
    for (float v : g) EXPECT_NEAR(v, 20024.0f, 20024.0f * 2e-3f);
  });
}

TEST(Reducer, CreationRefusesDifferingPlans) {
  RunRanks(4, [&](int rank, Communicator& comm) {
    std::vector<GradSpec> g = Specs(kCounts);
    if (rank == 2 || rank == 3) g[5].count = 999;
    auto red = Reducer::Create(&comm, g, SmallBuckets());
    ASSERT_EQ(red.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(red.status().message(), HasSubstr("gradient 'layer5.weight'"));
    EXPECT_THAT(red.status().message(), HasSubstr("ranks 2, 3"));

    g = Specs(kCounts);
    if (rank == 1) g.pop_back();
    red = Reducer::Create(&comm, g, SmallBuckets());
    EXPECT_THAT(red.status().message(), HasSubstr("number of gradients: rank 0 has 12, rank 1 has 11"));

    ReducerOptions o = SmallBuckets();
    if (rank == 0) o.bucket_cap_bytes = 4096;
    red = Reducer::Create(&comm, Specs(kCounts), o);
    EXPECT_THAT(red.status().message(), HasSubstr("bucket_cap_bytes"));

    o = SmallBuckets();
    if (rank == 3) o.comm_dtype = DataType::kInt8;  // refused locally; the others hear of it
    red = Reducer::Create(&comm, Specs(kCounts), o);
    EXPECT_FALSE(red.ok());
    if (rank != 3) {
      EXPECT_THAT(red.status().message(), HasSubstr("rank 3 refused"));
    }
  });
}

// An integer gradient is refused when the reducer is made, naming it, not at
// a later Finalize (the buckets' copy and scaling plans are floating point).
TEST(Reducer, RefusesIntegerGradientsAtCreate) {
  RunRanks(2, [&](int, Communicator& comm) {
    std::vector<GradSpec> g = Specs(kCounts);
    g[2].dtype = DataType::kInt32;
    g[2].name = "step_count";
    auto red = Reducer::Create(&comm, g, SmallBuckets());
    ASSERT_FALSE(red.ok());
    EXPECT_EQ(red.status().code(), absl::StatusCode::kInvalidArgument) << red.status();
    EXPECT_THAT(red.status().message(), HasSubstr("grads[2] ('step_count'): dtype = int32; gradients are float32"));
  });
}

}  // namespace
}  // namespace shard
}  // namespace weft

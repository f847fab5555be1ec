// Reusable copy plans (kernels/copy_plan.h) against kernels/reference, bit
// for bit, on salted random data: every dtype pair, odd sizes, misaligned
// starts, 1..500 tensors, 10,000 tiny ones and one large enough to be cut
// across threads, each plan run several times with new contents and scales.
// Registered with several thread counts (tests/unit/meson.build), so the
// prepared thread-pool tasks are checked as well as the inline loop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/stream.h"
#include "kernels/copy_plan.h"
#include "kernels/kernels.h"
#include "kernels/reference/reference.h"
#include "tests/unit/kernels_test_util.h"

namespace weft {
namespace kernels {
namespace {

using ::testing::HasSubstr;
using testing::Buffer;
using testing::ExpectSame;
using testing::FillRandom;
using testing::kFloatTypes;
using testing::kOddSizes;
using testing::kScales;
using testing::MakeTensors;
using testing::Refs;
using testing::Total;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// New random contents in place: a plan reads whatever its buffers hold.
void Refill(std::vector<Buffer>& bufs, std::mt19937_64& rng) {
  for (Buffer& b : bufs) FillRandom(b, rng);
}

TEST(KernelsPlan, FlattenEveryDtypePairMatchesReferenceRunAfterRun) {
  std::mt19937_64 rng(21);
  const std::vector<size_t> sizes(std::begin(kOddSizes), std::end(kOddSizes));
  for (DataType st : kFloatTypes) {
    for (DataType dt : kFloatTypes) {
      std::vector<Buffer> srcs = MakeTensors(sizes, st, false, rng);
      Buffer got(dt, Total(sizes), 3), want(dt, Total(sizes), 3);
      absl::StatusOr<CopyPlan> plan = CopyPlan::Flatten(Refs(srcs), got.data(), dt, nullptr);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->elements(), Total(sizes));
      for (float scale : kScales) {
        Refill(srcs, rng);
        got.Poison();
        want.Poison();
        ASSERT_TRUE(plan->Run(scale, nullptr).ok());
        reference::Flatten(Refs(srcs), want.data(), dt, nullptr, scale);
        ExpectSame(got, want, std::string(Name(st)) + "->" + Name(dt) + " scale " + std::to_string(scale));
      }
    }
  }
}

TEST(KernelsPlan, ManyMixedTensorsWithOffsetsLeaveGapsAlone) {
  std::mt19937_64 rng(22);
  for (int n : {1, 2, 17, 500}) {
    const testing::GappedCase c = testing::MakeGappedCase(n, rng);
    const std::vector<size_t>& sizes = c.sizes;
    const std::vector<size_t>& offsets = c.offsets;
    const size_t end = c.end;
    std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, n % 2 == 1, rng);
    for (DataType dt : kFloatTypes) {
      Buffer got(dt, end, 1), want(dt, end, 1);
      absl::StatusOr<CopyPlan> plan = CopyPlan::Flatten(Refs(srcs), got.data(), dt, offsets.data());
      ASSERT_TRUE(plan.ok()) << plan.status();
      for (float scale : {1.0f, 0.5f}) {
        got.Poison();
        want.Poison();  // the gaps must keep the poison
        ASSERT_TRUE(plan->Run(scale, nullptr).ok());
        reference::Flatten(Refs(srcs), want.data(), dt, offsets.data(), scale);
        ExpectSame(got, want, std::to_string(n) + " tensors -> " + Name(dt) + " scale " + std::to_string(scale));
      }
    }
  }
}

TEST(KernelsPlan, UnflattenAccumulatesOnEveryRun) {
  std::mt19937_64 rng(23);
  const std::vector<size_t> sizes(std::begin(kOddSizes), std::end(kOddSizes));
  for (DataType st : kFloatTypes) {
    for (DataType dt : kFloatTypes) {
      for (bool accumulate : {false, true}) {
        Buffer src(st, Total(sizes), 5);
        std::vector<Buffer> got = MakeTensors(sizes, dt, false, rng);
        std::vector<Buffer> want;
        for (Buffer& g : got) {
          if (!accumulate) g.Poison();
          want.push_back(g);
        }
        absl::StatusOr<CopyPlan> plan = CopyPlan::Unflatten(src.data(), st, nullptr, Refs(got), accumulate);
        ASSERT_TRUE(plan.ok()) << plan.status();
        for (float scale : {0.25f, 3.0f}) {  // twice: an accumulating plan adds again
          FillRandom(src, rng);
          ASSERT_TRUE(plan->Run(scale, nullptr).ok());
          reference::Unflatten(src.data(), st, nullptr, Refs(want), scale, accumulate);
          for (size_t i = 0; i < got.size(); ++i) {
            ExpectSame(got[i], want[i], std::string(Name(st)) + "->" + Name(dt) + (accumulate ? " += " : " = ") +
                                            "tensor " + std::to_string(i) + " scale " + std::to_string(scale));
          }
        }
      }
    }
  }
}

TEST(KernelsPlan, ChunkCatAndSplitMatchReference) {
  std::mt19937_64 rng(24);
  for (int world : {1, 3, 8}) {
    for (bool explicit_chunks : {false, true}) {
      const testing::ChunkCase c = testing::MakeChunkCase(world, explicit_chunks, rng);
      const std::vector<size_t>& sizes = c.sizes;
      const size_t slab = c.slab;
      const size_t* cc = explicit_chunks ? c.chunks.data() : nullptr;
      std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, true, rng);
      Buffer got(DataType::kBfloat16, slab * world, 1), want(DataType::kBfloat16, slab * world, 1);
      absl::StatusOr<CopyPlan> cat = CopyPlan::ChunkCat(Refs(srcs), world, cc, got.data(), DataType::kBfloat16);
      ASSERT_TRUE(cat.ok()) << cat.status();
      std::vector<Buffer> back = MakeTensors(sizes, DataType::kFloat32, true, rng);
      std::vector<Buffer> back_want = back;
      absl::StatusOr<CopyPlan> split = CopyPlan::ChunkSplit(got.data(), DataType::kBfloat16, world, cc, Refs(back), true);
      ASSERT_TRUE(split.ok()) << split.status();
      for (float scale : {0.5f, 1.0f}) {
        Refill(srcs, rng);
        got.Poison();
        want.Poison();
        ASSERT_TRUE(cat->Run(scale, nullptr).ok());
        reference::ChunkCat(Refs(srcs), world, cc, want.data(), DataType::kBfloat16, scale);
        ExpectSame(got, want, "chunk_cat world " + std::to_string(world));
        ASSERT_TRUE(split->Run(2.0f, nullptr).ok());
        reference::ChunkSplit(got.data(), DataType::kBfloat16, world, cc, Refs(back_want), 2.0f, true);
        for (size_t i = 0; i < back.size(); ++i) ExpectSame(back[i], back_want[i], "chunk_split tensor " + std::to_string(i));
      }
    }
  }
}

// Large enough (over 1 MiB) that with more than one thread the plan is cut
// into tasks: 10,000 tiny tensors share tasks, one large tensor is sliced.
TEST(KernelsPlan, TinyAndLargeTensorsAcrossTasks) {
  std::mt19937_64 rng(25);
  std::uniform_int_distribution<size_t> tiny(1, 512);
  std::vector<size_t> sizes(10000);
  for (size_t& s : sizes) s = tiny(rng);
  sizes[4321] = 3000001;
  std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, false, rng);
  for (DataType dt : {DataType::kFloat32, DataType::kBfloat16}) {
    Buffer got(dt, Total(sizes), 0), want(dt, Total(sizes), 0);
    absl::StatusOr<CopyPlan> fill = CopyPlan::Flatten(Refs(srcs), got.data(), dt, nullptr);
    ASSERT_TRUE(fill.ok()) << fill.status();
    for (float scale : {1.0f, 0.125f}) {
      got.Poison();
      want.Poison();
      ASSERT_TRUE(fill->Run(scale, nullptr).ok());
      reference::Flatten(Refs(srcs), want.data(), dt, nullptr, scale);
      ExpectSame(got, want, std::string("10,000 tiny + 1 large -> ") + Name(dt) + " scale " + std::to_string(scale));
    }
    // And back, accumulating into the tensors.
    std::vector<Buffer> back = srcs, back_want = srcs;
    absl::StatusOr<CopyPlan> out = CopyPlan::Unflatten(got.data(), dt, nullptr, Refs(back), true);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->Run(0.5f, nullptr).ok());
    reference::Unflatten(got.data(), dt, nullptr, Refs(back_want), 0.5f, true);
    for (size_t i = 0; i < back.size(); ++i) ExpectSame(back[i], back_want[i], "unflatten tensor " + std::to_string(i));
  }
}

TEST(KernelsPlan, SameBitsAsTheOneShotCall) {
  std::mt19937_64 rng(26);
  std::vector<size_t> sizes = {5, 0, 4099, 1, 65537, 3};
  std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, true, rng);
  Buffer planned(DataType::kFloat16, Total(sizes), 2), direct(DataType::kFloat16, Total(sizes), 2);
  planned.Poison();
  direct.Poison();
  absl::StatusOr<CopyPlan> plan = CopyPlan::Flatten(Refs(srcs), planned.data(), DataType::kFloat16, nullptr);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->Run(1.0f / 3.0f, nullptr).ok());
  ASSERT_TRUE(Flatten(Refs(srcs), direct.data(), DataType::kFloat16, nullptr, 1.0f / 3.0f, nullptr).ok());
  ExpectSame(planned, direct, "planned vs one-shot");
}

TEST(KernelsPlan, CreationRefusesWhatTheCallRefuses) {
  std::vector<float> a(8, 1.0f), b(5, 2.0f), out(13, 0.0f);
  std::vector<TensorRef> srcs = {{a.data(), 8, DataType::kFloat32}, {b.data(), 5, DataType::kFloat32}};
  srcs[1].data = nullptr;
  absl::StatusOr<CopyPlan> p = CopyPlan::Flatten(srcs, out.data(), DataType::kFloat32, nullptr);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(p.status()), HasSubstr("flatten plan"));
  EXPECT_THAT(Message(p.status()), HasSubstr("srcs[1].data is NULL"));
  srcs[1].data = b.data();
  // dst overlapping a source.
  p = CopyPlan::Flatten(srcs, a.data() + 4, DataType::kFloat32, nullptr);
  EXPECT_THAT(Message(p.status()), HasSubstr("overlaps"));
  p = CopyPlan::Flatten(srcs, out.data(), static_cast<DataType>(42), nullptr);
  EXPECT_THAT(Message(p.status()), HasSubstr("dst_dtype = 42"));
  p = CopyPlan::Unflatten(reinterpret_cast<char*>(out.data()) + 1, DataType::kFloat32, nullptr, srcs, false);
  EXPECT_THAT(Message(p.status()), HasSubstr("unflatten plan"));
  EXPECT_THAT(Message(p.status()), HasSubstr("not aligned"));
  p = CopyPlan::ChunkCat(srcs, 0, nullptr, out.data(), DataType::kFloat32);
  EXPECT_THAT(Message(p.status()), HasSubstr("world = 0"));
}

TEST(KernelsPlan, EmptyPlansRunAsNothing) {
  CopyPlan none;
  EXPECT_TRUE(none.Run(1.0f, nullptr).ok());
  EXPECT_EQ(none.elements(), 0u);
  absl::StatusOr<CopyPlan> p = CopyPlan::Flatten({}, nullptr, DataType::kBfloat16, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->Run(0.5f, nullptr).ok());
}

TEST(KernelsPlan, HostStreamKeepsThePlanAlive) {
  std::vector<float> a = {1, 2, 3}, b = {4, 5};
  std::vector<float> out(5, -1.0f);
  std::vector<TensorRef> srcs = {{a.data(), 3, DataType::kFloat32}, {b.data(), 2, DataType::kFloat32}};
  HostStream stream;
  {
    absl::StatusOr<CopyPlan> plan = CopyPlan::Flatten(srcs, out.data(), DataType::kFloat32, nullptr);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->Run(2.0f, &stream).ok());
  }  // the plan is gone; its enqueued run is not
  ASSERT_TRUE(stream.Synchronize().ok());
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8, 10}));

  absl::StatusOr<CopyPlan> plan = CopyPlan::Flatten(srcs, out.data(), DataType::kFloat32, nullptr);
  ASSERT_TRUE(plan.ok());
  int not_a_stream = 0;
  absl::Status st = plan->Run(1.0f, &not_a_stream);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("not a live weft host stream"));
}

}  // namespace
}  // namespace kernels
}  // namespace weft

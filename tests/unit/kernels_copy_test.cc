// Flatten, unflatten, chunk-cat and chunk-split through kernels/kernels.h,
// compared bit for bit with kernels/reference on salted random data, for
// every dtype pair, odd sizes, misaligned starts and 1..500 tensors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/reference/reference.h"
#include "tests/unit/kernels_test_util.h"

namespace weft {
namespace kernels {
namespace {

using testing::Buffer;
using testing::FillRandom;
using testing::FirstDifference;
using testing::Hex;
using testing::kFloatTypes;
using testing::kOddSizes;
using testing::kScales;
using testing::ExpectSame;
using testing::MakeTensors;
using testing::Refs;
using testing::Total;

TEST(KernelsFlatten, EveryDtypePairMatchesReference) {
  std::mt19937_64 rng(1);
  const std::vector<size_t> sizes(std::begin(kOddSizes), std::end(kOddSizes));
  for (DataType st : kFloatTypes) {
    for (DataType dt : kFloatTypes) {
      for (float scale : kScales) {
        std::vector<Buffer> srcs = MakeTensors(sizes, st, false, rng);
        Buffer got(dt, Total(sizes), 3), want(dt, Total(sizes), 3);
        got.Poison();
        want.Poison();
        ASSERT_TRUE(Flatten(Refs(srcs), got.data(), dt, nullptr, scale, nullptr).ok());
        reference::Flatten(Refs(srcs), want.data(), dt, nullptr, scale);
        ExpectSame(got, want, std::string(Name(st)) + "->" + Name(dt) + " scale " + std::to_string(scale));
      }
    }
  }
}

TEST(KernelsFlatten, MixedSourceTypesWithOffsetsLeaveGapsAlone) {
  std::mt19937_64 rng(2);
  for (int n : {1, 2, 17, 500}) {
    const testing::GappedCase c = testing::MakeGappedCase(n, rng);
    const std::vector<size_t>& sizes = c.sizes;
    const std::vector<size_t>& offsets = c.offsets;
    const size_t end = c.end;
    std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, true, rng);
    for (DataType dt : kFloatTypes) {
      Buffer got(dt, end, 1), want(dt, end, 1);
      got.Poison();
      want.Poison();  // the gaps must keep the poison
      ASSERT_TRUE(Flatten(Refs(srcs), got.data(), dt, offsets.data(), 0.5f, nullptr).ok());
      reference::Flatten(Refs(srcs), want.data(), dt, offsets.data(), 0.5f);
      ExpectSame(got, want, std::to_string(n) + " tensors -> " + Name(dt));
    }
  }
}

TEST(KernelsUnflatten, EveryDtypePairWithAndWithoutAccumulation) {
  std::mt19937_64 rng(3);
  const std::vector<size_t> sizes(std::begin(kOddSizes), std::end(kOddSizes));
  for (DataType st : kFloatTypes) {
    for (DataType dt : kFloatTypes) {
      for (bool accumulate : {false, true}) {
        Buffer src(st, Total(sizes), 5);
        FillRandom(src, rng);
        std::vector<Buffer> got = MakeTensors(sizes, dt, false, rng);
        std::vector<Buffer> want;
        for (Buffer& g : got) {
          if (!accumulate) g.Poison();
          want.push_back(g);
        }
        ASSERT_TRUE(Unflatten(src.data(), st, nullptr, Refs(got), 0.25f, accumulate, nullptr).ok());
        reference::Unflatten(src.data(), st, nullptr, Refs(want), 0.25f, accumulate);
        for (size_t i = 0; i < got.size(); ++i) {
          ExpectSame(got[i], want[i], std::string(Name(st)) + "->" + Name(dt) + (accumulate ? " += " : " = ") +
                                          "tensor " + std::to_string(i));
        }
      }
    }
  }
}

TEST(KernelsChunk, LayoutIsFsdp2ChunkCat) {
  // a = 0..4 (5 elements), b = 10, 11; world 2: chunks 3 and 1, slab 4.
  std::vector<float> a = {0, 1, 2, 3, 4}, b = {10, 11};
  std::vector<TensorRef> srcs = {{a.data(), 5, DataType::kFloat32}, {b.data(), 2, DataType::kFloat32}};
  std::vector<float> out(8, -1.0f);
  ASSERT_TRUE(ChunkCat(srcs, 2, nullptr, out.data(), DataType::kFloat32, 1.0f, nullptr).ok());
  EXPECT_EQ(out, (std::vector<float>{0, 1, 2, 10, 3, 4, 0, 11}));
  std::vector<float> a2(5, -1.0f), b2(2, -1.0f);
  std::vector<TensorRef> dsts = {{a2.data(), 5, DataType::kFloat32}, {b2.data(), 2, DataType::kFloat32}};
  ASSERT_TRUE(ChunkSplit(out.data(), DataType::kFloat32, 2, nullptr, dsts, 1.0f, false, nullptr).ok());
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b2, b);
}

TEST(KernelsChunk, MatchesReferenceForManyTensorsAndWorlds) {
  std::mt19937_64 rng(4);
  for (int world : {1, 2, 3, 8}) {
    for (bool explicit_chunks : {false, true}) {
      const testing::ChunkCase c = testing::MakeChunkCase(world, explicit_chunks, rng);
      const std::vector<size_t>& sizes = c.sizes;
      const size_t slab = c.slab;
      const size_t* cc = explicit_chunks ? c.chunks.data() : nullptr;
      std::vector<Buffer> srcs = MakeTensors(sizes, DataType::kFloat32, true, rng);
      Buffer got(DataType::kBfloat16, slab * world, 1), want(DataType::kBfloat16, slab * world, 1);
      got.Poison();
      want.Poison();
      ASSERT_TRUE(ChunkCat(Refs(srcs), world, cc, got.data(), DataType::kBfloat16, 0.5f, nullptr).ok());
      reference::ChunkCat(Refs(srcs), world, cc, want.data(), DataType::kBfloat16, 0.5f);
      ExpectSame(got, want, "chunk_cat world " + std::to_string(world));

      std::vector<Buffer> back = MakeTensors(sizes, DataType::kFloat32, true, rng);
      std::vector<Buffer> back_want = back;
      ASSERT_TRUE(ChunkSplit(got.data(), DataType::kBfloat16, world, cc, Refs(back), 2.0f, true, nullptr).ok());
      reference::ChunkSplit(got.data(), DataType::kBfloat16, world, cc, Refs(back_want), 2.0f, true);
      for (size_t i = 0; i < back.size(); ++i) ExpectSame(back[i], back_want[i], "chunk_split tensor " + std::to_string(i));
    }
  }
}

TEST(KernelsFlatten, SameTypeUnscaledCopyKeepsEveryBit) {
  // Signalling NaNs and payloads survive: the copy moves bits.
  std::vector<uint32_t> src = {0x7f800001u, 0xffa00000u, 0x00000001u, 0x80000000u, 0x7fc12345u};
  std::vector<uint32_t> dst(src.size(), 0);
  std::vector<TensorRef> srcs = {{src.data(), src.size(), DataType::kFloat32}};
  ASSERT_TRUE(Flatten(srcs, dst.data(), DataType::kFloat32, nullptr, 1.0f, nullptr).ok());
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace kernels
}  // namespace weft

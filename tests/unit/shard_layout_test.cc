// shard/layout.h: golden layouts, and on random parameter lists the
// property that every element of every parameter is held by exactly one
// rank, at a distinct place in that rank's shard.
#include "shard/layout.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace weft {
namespace shard {
namespace {

struct Want { size_t param_offset, length, shard_offset; };

void ExpectShards(const ShardLayout& l, int rank, const std::vector<Want>& want) {
  const auto got = l.RankShards(rank);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].length, want[i].length) << "rank " << rank << " param " << i;
    if (want[i].length == 0) continue;
    EXPECT_EQ(got[i].param_offset, want[i].param_offset) << "rank " << rank << " param " << i;
    EXPECT_EQ(got[i].shard_offset, want[i].shard_offset) << "rank " << rank << " param " << i;
  }
}

TEST(ShardLayout, FlatGolden) {
  const std::vector<ParamSpec> p = {{"a", {5}}, {"b", {3}}, {"c", {2, 2}}};
  auto l = PlanShards(p, 4, LayoutKind::kFlat);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->total_numel, 12u);
  EXPECT_EQ(l->shard_numel, 3u);
  EXPECT_EQ(l->padding(), 0u);
  EXPECT_EQ(l->offset, (std::vector<size_t>{0, 5, 8}));
  ExpectShards(*l, 0, {{0, 3, 0}, {0, 0, 0}, {0, 0, 0}});
  ExpectShards(*l, 1, {{3, 2, 0}, {0, 1, 2}, {0, 0, 0}});
  ExpectShards(*l, 2, {{0, 0, 0}, {1, 2, 0}, {0, 1, 2}});
  ExpectShards(*l, 3, {{0, 0, 0}, {0, 0, 0}, {1, 3, 0}});
}

TEST(ShardLayout, FlatPadsToTheWorld) {
  auto l = PlanShards(std::vector<ParamSpec>{{"w", {10}}}, 3, LayoutKind::kFlat);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->shard_numel, 4u);
  EXPECT_EQ(l->padding(), 2u);
  ExpectShards(*l, 2, {{8, 2, 0}});
}

TEST(ShardLayout, PerParamGolden) {
  const std::vector<ParamSpec> p = {{"w", {5, 2}}, {"b", {3}}, {"s", {}}};
  auto l = PlanShards(p, 2, LayoutKind::kPerParam);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->chunk_rows, (std::vector<size_t>{3, 2, 1}));
  EXPECT_EQ(l->row_numel, (std::vector<size_t>{2, 1, 1}));
  EXPECT_EQ(l->offset, (std::vector<size_t>{0, 6, 8}));
  EXPECT_EQ(l->shard_numel, 9u);
  EXPECT_EQ(l->padding(), 18u - 14u);
  ExpectShards(*l, 0, {{0, 6, 0}, {0, 2, 6}, {0, 1, 8}});
  ExpectShards(*l, 1, {{6, 4, 0}, {2, 1, 6}, {0, 0, 8}});
}

TEST(ShardLayout, RefusesBadInput) {
  EXPECT_EQ(PlanShards(std::vector<ParamSpec>{{"w", {4}}}, 0, LayoutKind::kFlat).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto neg = PlanShards(std::vector<ParamSpec>{{"w", {4, -1}}}, 2, LayoutKind::kFlat);
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("(\"w\"): shape[1] = -1"), std::string::npos) << neg.status();
  auto big = PlanShards(std::vector<ParamSpec>{{"x", {1LL << 40, 1LL << 40}}}, 2, LayoutKind::kFlat);
  EXPECT_FALSE(big.ok());
}

TEST(ShardLayout, EveryElementHasExactlyOneOwner) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<ParamSpec> p(1 + rng() % 6);
    for (auto& s : p) {
      s.shape.resize(rng() % 3);
      for (auto& d : s.shape) d = rng() % 7;
    }
    const int world = 1 + static_cast<int>(rng() % 5);
    for (LayoutKind kind : {LayoutKind::kFlat, LayoutKind::kPerParam}) {
      auto l = PlanShards(p, world, kind);
      ASSERT_TRUE(l.ok()) << l.status();
      std::vector<std::vector<int>> owners(p.size());
      for (size_t i = 0; i < p.size(); ++i) owners[i].assign(l->numel[i], 0);
      for (int r = 0; r < world; ++r) {
        std::vector<int> used(l->shard_numel, 0);
        for (const ParamShard& s : l->RankShards(r)) {
          ASSERT_LE(s.param_offset + s.length, l->numel[s.param]);
          ASSERT_LE(s.shard_offset + s.length, l->shard_numel);
          for (size_t j = 0; j < s.length; ++j) {
            ++owners[s.param][s.param_offset + j];
            ++used[s.shard_offset + j];
          }
        }
        for (int u : used) ASSERT_LE(u, 1) << "two elements in one shard slot";
      }
      for (const auto& o : owners)
        for (int c : o) ASSERT_EQ(c, 1) << "kind " << static_cast<int>(kind) << " world " << world;
    }
  }
}

}  // namespace
}  // namespace shard
}  // namespace weft

// The topology and the hierarchy's table (comm/p2p/topology.h): pure
// functions of what every rank shares.
#include "comm/p2p/topology.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace p2p {
namespace {

TEST(Topology, NodesInOrderOfTheirFirstRank) {
  // Ranks placed round the nodes: a, b, a, b, c, c.
  const Topology t = Topology::FromKeys({"b", "a", "b", "a", "c", "c"});
  EXPECT_EQ(t.nodes(), 3);
  EXPECT_EQ(t.node_of, (std::vector<int>{0, 1, 0, 1, 2, 2}));
  EXPECT_EQ(t.local_of, (std::vector<int>{0, 0, 1, 1, 0, 1}));
  EXPECT_EQ(t.RankAt(1, 1), 3);
  EXPECT_EQ(t.RankAt(2, 0), 4);
  EXPECT_TRUE(t.uniform());
  EXPECT_EQ(t.local_size(), 2);
  EXPECT_EQ(t.Describe(), "3 nodes x 2 ranks");
}

TEST(Topology, UnevenNodesAreNotUniform) {
  const Topology t = Topology::FromKeys({"a", "a", "b"});
  EXPECT_FALSE(t.uniform());
  EXPECT_EQ(t.Describe(), "2 nodes (2, 1 ranks)");
  EXPECT_FALSE(HierarchyApplies(DefaultHierTable(), t));
  EXPECT_FALSE(HierarchyApplies(*ParseHierTable("on"), t));
}

TEST(HierTable, DefaultNeedsSeveralNodesOfSeveralRanks) {
  const HierTable d = DefaultHierTable();
  const Topology one = Topology::FromKeys({"a", "a", "a", "a"});
  const Topology two = Topology::FromKeys({"a", "a", "b", "b"});
  const Topology singles = Topology::FromKeys({"a", "b", "c", "d"});
  const size_t from = d.from_bytes[static_cast<size_t>(HierKind::kAllReduce)];
  EXPECT_FALSE(UseHierarchy(d, HierKind::kAllReduce, from, one));
  EXPECT_FALSE(UseHierarchy(d, HierKind::kAllReduce, from, singles));
  EXPECT_TRUE(UseHierarchy(d, HierKind::kAllReduce, from, two));
  EXPECT_FALSE(UseHierarchy(d, HierKind::kAllReduce, from - 1, two));
  // "on": every size, and one rank per node too; never an empty call.
  const HierTable on = *ParseHierTable("on");
  EXPECT_TRUE(UseHierarchy(on, HierKind::kBroadcast, 1, singles));
  EXPECT_FALSE(UseHierarchy(on, HierKind::kBroadcast, 0, singles));
  EXPECT_FALSE(UseHierarchy(*ParseHierTable("off"), HierKind::kAllGather, size_t{1} << 30, two));
}

TEST(HierTable, PerCollectiveOverrides) {
  const absl::StatusOr<HierTable> t = ParseHierTable("all_reduce=1M,broadcast=off,all_gather=0,reduce_scatter=4096");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->from_bytes[static_cast<size_t>(HierKind::kAllReduce)], size_t{1} << 20);
  EXPECT_EQ(t->from_bytes[static_cast<size_t>(HierKind::kBroadcast)], HierTable::kNever);
  EXPECT_EQ(t->from_bytes[static_cast<size_t>(HierKind::kAllGather)], 0u);
  EXPECT_EQ(t->from_bytes[static_cast<size_t>(HierKind::kReduceScatter)], 4096u);
  EXPECT_EQ(t->Describe(), "all_reduce from 1 MiB, reduce_scatter from 4 KiB, all_gather always, broadcast never, "
            "all_reduce in pieces of 8 MiB");
  // Unnamed collectives keep the default; equal tables hash alike.
  const absl::StatusOr<HierTable> partial = ParseHierTable("broadcast=off");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->from_bytes[0], DefaultHierTable().from_bytes[0]);
  EXPECT_EQ(ParseHierTable("auto")->Hash(), DefaultHierTable().Hash());
  EXPECT_NE(partial->Hash(), DefaultHierTable().Hash());
}

TEST(HierTable, BadValuesNameTheVariableAndTheItem) {
  for (const char* bad : {"sometimes", "all_reduce", "all_reduce=", "all_reduce=12Q", "alltoall=0", "all_reduce=-1",
                          "all_reduce=99999999999999999999G", "all_reduce=1M,"}) {
    const absl::StatusOr<HierTable> t = ParseHierTable(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_NE(t.status().message().find(std::string("WEFT_HIER=\"") + bad + "\""), std::string::npos)
        << t.status();
  }
}

TEST(HierTable, PieceSizeIsPartOfTheTable) {
  const absl::StatusOr<HierTable> t = ParseHierTable("on,piece=2M");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->piece_bytes, size_t{2} << 20);
  EXPECT_TRUE(t->single_rank_nodes);
  EXPECT_EQ(t->from_bytes[static_cast<size_t>(HierKind::kAllReduce)], 0u);
  EXPECT_NE(t->Describe().find("all_reduce in pieces of 2 MiB"), std::string::npos) << t->Describe();
  // Ranks whose pieces differ would cut one call differently: the hash tells.
  EXPECT_NE(t->Hash(), ParseHierTable("on,piece=4M")->Hash());
  EXPECT_EQ(ParseHierTable("piece=off")->piece_bytes, 0u);
  EXPECT_EQ(ParseHierTable("off,piece=1M")->piece_bytes, size_t{1} << 20);
  EXPECT_FALSE(ParseHierTable("off,piece=1M")->any());
  for (const char* bad : {"piece", "piece=", "piece=3X", "piece=1M,on", "auto,auto"}) {
    const absl::StatusOr<HierTable> b = ParseHierTable(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find(std::string("WEFT_HIER=\"") + bad + "\""), std::string::npos) << b.status();
  }
}

// The pieces cover the body (count - count % L) exactly, in order, each a
// multiple of L, equal but for a shorter last one.
void ExpectCovers(const std::vector<HierPiece>& pieces, size_t count, int L) {
  size_t next = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    EXPECT_EQ(pieces[k].first, next) << "piece " << k;
    EXPECT_GT(pieces[k].count, 0u) << "piece " << k;
    EXPECT_EQ(pieces[k].count % static_cast<size_t>(L), 0u) << "piece " << k;
    if (k + 1 < pieces.size()) {
      EXPECT_EQ(pieces[k].count, pieces[0].count) << "piece " << k;
    }
    next += pieces[k].count;
  }
  EXPECT_EQ(next, count - count % static_cast<size_t>(L));
}

TEST(HierPieces, CutTheBodyIntoPiecesOfAboutTheSize) {
  // 64 MiB of float32 over nodes of 2 ranks, 4 MiB pieces: 16 of 1 Mi elements.
  const std::vector<HierPiece> p = PlanHierPieces(size_t{16} << 20, 4, 2, size_t{4} << 20);
  ASSERT_EQ(p.size(), 16u);
  EXPECT_EQ(p[1], (HierPiece{size_t{1} << 20, size_t{1} << 20}));
  ExpectCovers(p, size_t{16} << 20, 2);
  // No pieces set, or a message within one: one piece of the whole body.
  EXPECT_EQ(PlanHierPieces(1001, 4, 2, 0), (std::vector<HierPiece>{{0, 1000}}));
  EXPECT_EQ(PlanHierPieces(1001, 4, 2, size_t{1} << 20), (std::vector<HierPiece>{{0, 1000}}));
  // Fewer elements than local ranks: no body at all (the tail takes them).
  EXPECT_TRUE(PlanHierPieces(2, 4, 3, 64).empty());
  EXPECT_TRUE(PlanHierPieces(0, 4, 2, 64).empty());
  // Never more pieces than kMaxHierPieces, nor than elements per local rank.
  EXPECT_EQ(PlanHierPieces(size_t{1} << 30, 1, 4, 1).size(), kMaxHierPieces);
  EXPECT_EQ(PlanHierPieces(9, 8, 3, 1).size(), 3u);
  for (size_t count : {size_t{7}, size_t{1001}, size_t{65541}, size_t{1} << 20}) {
    for (int L : {1, 2, 3, 8}) {
      for (size_t piece : {size_t{0}, size_t{100}, size_t{4096}, size_t{1} << 20}) {
        ExpectCovers(PlanHierPieces(count, 4, L, piece), count, L);
      }
    }
  }
}

// The inter-node part of local rank 1 on 2 nodes x 2 ranks: its ranks 0 and
// 1 are world ranks 1 and 3.
TEST(RenameRanks, NamesThePartsRanksAsTheWorlds) {
  const std::vector<int> w = {1, 3};
  EXPECT_EQ(RenameRanks("rank 0 waited 3000 ms without progress; still waiting to receive from rank(s) {1} and to "
                        "send to rank(s) {0, 1}", w, 4),
            "rank 1 waited 3000 ms without progress; still waiting to receive from rank(s) {3} and to send to "
            "rank(s) {1, 3}");
  EXPECT_EQ(RenameRanks("rank 1 of 2 has waited 20 ms in call #4 all_reduce; not arrived: rank(s) {0}; rank 0 "
                        "(10.77.0.1): not arrived", w, 4),
            "rank 3 of 4 has waited 20 ms in call #4 all_reduce; not arrived: rank(s) {1}; rank 1 (10.77.0.1): not "
            "arrived");
  EXPECT_EQ(RenameRanks("Rank 1's buffer; ranks: 0, 1; missing rank(s): 1", w, 4),
            "Rank 3's buffer; ranks: 1, 3; missing rank(s): 3");
  // Numbers that are not the part's ranks, and words that only begin alike.
  EXPECT_EQ(RenameRanks("2 ranks, rank 7, ranked 1, frank 0, rank 1ms, rank(s) {}, rank", w, 4),
            "2 ranks, rank 7, ranked 1, frank 0, rank 1ms, rank(s) {}, rank");
  EXPECT_EQ(RenameRanks("", w, 4), "");
}

}  // namespace
}  // namespace p2p
}  // namespace weft

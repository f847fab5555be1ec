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
  EXPECT_EQ(t->Describe(), "all_reduce from 1 MiB, reduce_scatter from 4 KiB, all_gather always, broadcast never");
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

}  // namespace
}  // namespace p2p
}  // namespace weft

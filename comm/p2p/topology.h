// Where a point-to-point communicator's ranks run, and which collectives go
// hierarchical over it: plans as pure functions of data every rank shares,
// so every rank picks the same path for a call.
//
// A multi-node world (ranks on more than one host, told apart by their
// bootstrap::NodeKey, host name and boot id) can run its large collectives
// in three steps, as NCCL's, Horovod's and UCC's hierarchical algorithms do:
// within each node over shared memory, across nodes among the ranks of equal
// local rank (each carries its node's share, so every inter-node link moves
// one node's worth, not the whole ring's), and within each node again
// (comm/p2p/hierarchy.h). Whether a call does is a table kept as data: per
// collective, the bytes from which it pays, which WEFT_HIER overrides:
//
//   WEFT_HIER=auto            the table below (the default)
//   WEFT_HIER=off             always flat
//   WEFT_HIER=on              always hierarchical where the topology allows
//                             (also with one rank per node)
//   WEFT_HIER=all_reduce=1M,broadcast=off,all_gather=0
//                             per collective: from this many bytes (K, M, G
//                             suffixes), off, or 0 (always); others keep the
//                             table's
//   WEFT_HIER=...,piece=4M    the size of all_reduce's pipeline pieces (below);
//                             off or 0: one piece. Alone or after a collective
//                             list, and also after on or off (on,piece=8M)
//
// The hierarchy needs every node to hold the same number of ranks; other
// layouts stay flat (WEFT_DEBUG=INFO says so at init).
#ifndef WEFT_COMM_P2P_TOPOLOGY_H_
#define WEFT_COMM_P2P_TOPOLOGY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft {
namespace p2p {

struct Topology {
  // Nodes are numbered in the order their first rank appears (rank 0's is
  // node 0); each node's ranks in rank order are its local ranks.
  std::vector<int> node_of;                // per rank
  std::vector<int> local_of;               // per rank
  std::vector<std::vector<int>> ranks_of;  // per node: its ranks, in rank order

  int nodes() const { return static_cast<int>(ranks_of.size()); }
  int size() const { return static_cast<int>(node_of.size()); }
  // Every node holds the same number of ranks.
  bool uniform() const;
  // Ranks per node, where uniform().
  int local_size() const { return ranks_of.empty() ? 0 : static_cast<int>(ranks_of.front().size()); }
  int RankAt(int node, int local) const { return ranks_of[static_cast<size_t>(node)][static_cast<size_t>(local)]; }
  // "2 nodes x 2 ranks" or "3 nodes (2, 2, 1 ranks)".
  std::string Describe() const;

  // From every rank's node key, in rank order.
  static Topology FromKeys(const std::vector<std::string>& keys);
};

enum class HierKind : int { kAllReduce = 0, kReduceScatter, kAllGather, kBroadcast };
inline constexpr int kNumHierKinds = 4;
const char* Name(HierKind k);

struct HierTable {
  static constexpr size_t kNever = SIZE_MAX;
  // Per HierKind: the message bytes (the whole buffer: all_reduce's count,
  // reduce_scatter's input, all_gather's output, broadcast's message) from
  // which the call goes hierarchical.
  std::array<size_t, kNumHierKinds> from_bytes{};
  // Also with one rank per node (WEFT_HIER=on): for tests, which then reach
  // the inter-node step alone.
  bool single_rank_nodes = false;
  // all_reduce runs its steps on pieces of about this many bytes, so that one
  // piece crosses the network while the next is reduced within the node and
  // the last is spread back (hierarchy.h); 0: the whole message at once.
  size_t piece_bytes = 0;

  bool any() const;
  // "all_reduce from 64 KiB, reduce_scatter from 64 KiB, ..."
  std::string Describe() const;
  // A hash every rank compares at init: ranks whose WEFT_HIER differ would
  // pick different paths for one call.
  uint64_t Hash() const;
};

// The table measured on namespaced nodes (docs/performance.md).
HierTable DefaultHierTable();
// WEFT_HIER's value (see above); an empty value is the default table.
absl::StatusOr<HierTable> ParseHierTable(const std::string& spec);
// Whether the topology admits the hierarchy under `table` at all.
bool HierarchyApplies(const HierTable& table, const Topology& topo);
// Whether a call of `bytes` goes hierarchical.
bool UseHierarchy(const HierTable& table, HierKind kind, size_t bytes, const Topology& topo);

// One piece of a pipelined all_reduce: elements [first, first + count) of
// the message, count a multiple of the node's ranks.
struct HierPiece {
  size_t first = 0;
  size_t count = 0;
  bool operator==(const HierPiece& o) const { return first == o.first && count == o.count; }
};
// The pieces of an all_reduce of `count` elements of `elem_bytes` over nodes
// of `local_size` ranks: the first count - count % local_size elements, cut
// into pieces of about `piece_bytes` (at most kMaxHierPieces; equal but for
// the last, which may be shorter). Empty when fewer than local_size elements;
// one piece when piece_bytes is 0 or the message fits one. A pure function of
// what every rank passes, so every rank cuts the message alike.
inline constexpr size_t kMaxHierPieces = 64;
std::vector<HierPiece> PlanHierPieces(size_t count, size_t elem_bytes, int local_size, size_t piece_bytes);

// A message of one of the hierarchy's communicators (the node's, or the
// inter-node one) with its ranks named as the world's: every number after
// "rank", "ranks" or "rank(s)" (also as a list: "rank(s) {0, 1}", "ranks: 0,
// 1") that is a rank of the part, r, becomes world_of[r]; "rank r of N" also
// gets the world's size for N. Other numbers (sizes, milliseconds, counts
// before "ranks") stay as they are.
std::string RenameRanks(const std::string& message, const std::vector<int>& world_of, int world_size);

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_TOPOLOGY_H_

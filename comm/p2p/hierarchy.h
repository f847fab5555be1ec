// The hierarchical collectives of a multi-node point-to-point communicator
// (topology.h says when a call takes them): one communicator of this rank's
// node (shared-memory rounds) and one of the ranks that share its local rank
// across the nodes (the network), split from the world once at init.
//
// With K nodes of L ranks each and a message of S bytes:
//   all_reduce      node reduce-scatter (local rank l keeps slice l of S/L),
//                   all-reduce of slice l across the nodes, node all-gather.
//                   Each node sends and receives S(K-1)/K over the network,
//                   the least an all-reduce can; a flat ring over K*L ranks
//                   makes each inter-node link carry up to L times that.
//                   Counts that L does not divide reduce their last count % L
//                   elements by a node and then an inter-node all-reduce.
//                   Pipelined: the message is cut into pieces (the table's
//                   piece_bytes, topology.h's PlanHierPieces), and while
//                   piece k crosses the network (on a host stream of the
//                   hierarchy's own), this thread reduces piece k+1 within
//                   the node and spreads piece k-1 back. Without that the
//                   node's two steps add to the network's time; with it
//                   only the first piece's reduce-scatter and the last
//                   one's all-gather do.
//   reduce_scatter  node reduce-scatter of the blocks bound for the ranks of
//                   each local rank, then a reduce-scatter across the nodes.
//   all_gather      all-gather across the nodes, then within the node, then
//                   the blocks put in rank order.
//   broadcast       across the nodes among the ranks of the root's local
//                   rank, then within every node from that rank.
// Reductions combine within the node in local-rank order, then across the
// nodes in the inter-node ring's fixed order over each piece's slice; the
// pieces are a function of the count, the type, the node size and the table
// alone, which every rank shares, so every rank reduces every element in
// the same order and ends with the same bits. Where the flat ring would reduce in a wider type (float16 and
// bfloat16, and avg of integers: core/reduce.h) the steps run in that type
// and the result is narrowed once at the end; avg sums in the steps and
// divides once by the world's size.
#ifndef WEFT_COMM_P2P_HIERARCHY_H_
#define WEFT_COMM_P2P_HIERARCHY_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/p2p/topology.h"
#include "core/dtype.h"
#include "core/stream.h"

namespace weft {
namespace p2p {

class Hierarchy {
 public:
  // Splits the world (collective over it): `split(color, key)` is the
  // world's own split.
  using SplitFn = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(int color, int key)>;
  static absl::StatusOr<std::unique_ptr<Hierarchy>> Make(int rank, const Topology& topo, const HierTable& table,
                                                         const SplitFn& split);

  // The world's checked arguments; every rank of the world calls.
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op);
  absl::Status ReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op);
  absl::Status AllGather(const void* send, void* recv, size_t sendcount, DataType t);
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType t, int root);
  // Wakes whatever a step waits in (the world was aborted).
  void Abort();

  Communicator& node() const { return *node_; }
  Communicator& cross() const { return *cross_; }

 private:
  Hierarchy(int rank, Topology topo, size_t piece_bytes)
      : rank_(rank), topo_(std::move(topo)), piece_bytes_(piece_bytes) {}
  // The three steps on each piece, pipelined where there are several.
  absl::Status AllReducePieces(const std::vector<HierPiece>& pieces, const void* in, void* out, unsigned char* slice,
                               DataType w, RedOp op);
  // Two regions of scratch, each 64-byte aligned, reused across calls.
  unsigned char* Scratch(size_t first, size_t second, unsigned char** second_out);
  // A step's failure, saying which step and which world ranks took part.
  absl::Status Step(const char* call, int step, bool across, absl::Status s) const;

  const int rank_;
  const Topology topo_;
  const size_t piece_bytes_;
  std::unique_ptr<Communicator> node_, cross_;
  std::unique_ptr<unsigned char[]> scratch_;
  size_t scratch_bytes_ = 0;
  // Runs the inter-node steps of a pipelined all_reduce, made at its first
  // use. Declared after cross_, so it is joined before cross_ goes.
  std::unique_ptr<HostStream> across_;
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_HIERARCHY_H_

#include "comm/p2p/hierarchy.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/reduce.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

constexpr size_t kAlign = 64;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The flat ring's rule (ring.cc): reduce in the accumulation type where the
// element type would round at every step or avg needs the exact sum.
bool StagesWiden(DataType t, RedOp op) { return !AccumIsSelf(t) && (IsHalf(t) || op == RedOp::kAvg); }
// The steps sum; the end divides once by the world's size.
RedOp StepOp(RedOp op) { return op == RedOp::kAvg ? RedOp::kSum : op; }

const unsigned char* At(const void* p, size_t bytes) { return static_cast<const unsigned char*>(p) + bytes; }
unsigned char* At(void* p, size_t bytes) { return static_cast<unsigned char*>(p) + bytes; }

// All-reduce takes three steps, the others two.
int StepsOf(const char* call) { return std::strcmp(call, "all_reduce") == 0 ? 3 : 2; }

}  // namespace

absl::StatusOr<std::unique_ptr<Hierarchy>> Hierarchy::Make(int rank, const Topology& topo, const HierTable& table,
                                                           const SplitFn& split) {
  std::unique_ptr<Hierarchy> h(new Hierarchy(rank, topo, table.piece_bytes));
  const int node = topo.node_of[static_cast<size_t>(rank)];
  const int local = topo.local_of[static_cast<size_t>(rank)];
  // Node communicator: ranked by local rank. Inter-node: ranked by node.
  ASSIGN_OR_RETURN(h->node_, split(node, local));
  ASSIGN_OR_RETURN(h->cross_, split(local, node));
  if (h->node_ == nullptr || h->cross_ == nullptr || h->node_->size() != topo.local_size() ||
      h->cross_->size() != topo.nodes()) {
    return InternalError("rank %d: the hierarchy's split gave communicators of %d and %d ranks for %s", rank,
                    h->node_ ? h->node_->size() : 0, h->cross_ ? h->cross_->size() : 0, topo.Describe());
  }
  return h;
}

unsigned char* Hierarchy::Scratch(size_t first, size_t second, unsigned char** second_out) {
  const size_t need = RoundUp(first) + second;
  if (need > scratch_bytes_) {
    scratch_.reset(new unsigned char[need + kAlign]);
    scratch_bytes_ = need;
  }
  unsigned char* base = scratch_.get();
  base += (kAlign - reinterpret_cast<uintptr_t>(base) % kAlign) % kAlign;
  if (second_out != nullptr) *second_out = base + RoundUp(first);
  return base;
}

absl::Status Hierarchy::Step(const char* call, int step, bool across, absl::Status s) const {
  if (s.ok()) return s;
  const int local = topo_.local_of[static_cast<size_t>(rank_)];
  const int node = topo_.node_of[static_cast<size_t>(rank_)];
  // The part's rank r is world rank world_of[r]: the part's own messages
  // name its ranks, which a user of the world cannot place.
  std::vector<int> world_of;
  std::string where;
  if (across) {
    std::vector<std::string> named;
    for (int n = 0; n < topo_.nodes(); ++n) {
      world_of.push_back(topo_.RankAt(n, local));
      named.push_back(absl::StrFormat("%d (node %d)", world_of.back(), n));
    }
    where = absl::StrFormat("across the nodes, among world ranks %s", absl::StrJoin(named, ", "));
  } else {
    world_of = topo_.ranks_of[static_cast<size_t>(node)];
    where = absl::StrFormat("within node %d, world ranks %s", node, absl::StrJoin(world_of, ", "));
  }
  absl::Status named(s.code(), absl::StrFormat("rank %d: hierarchical %s, step %d of %d (%s): %s", rank_, call, step,
                                               StepsOf(call), where,
                                               RenameRanks(std::string(s.message()), world_of, topo_.size())));
  // Markers (a dead peer, mismatched calls) go with it.
  s.ForEachPayload([&named](absl::string_view url, const absl::Cord& payload) { named.SetPayload(url, payload); });
  return named;
}

absl::Status Hierarchy::AllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op) {
  const bool widen = StagesWiden(t, op);
  const DataType w = widen ? AccumType(t) : t;
  const RedOp sop = StepOp(op);
  const size_t es = ElementSize(w);
  const size_t L = static_cast<size_t>(node_->size());
  const size_t base = count / L, tail = count - base * L;
  unsigned char* slice = nullptr;
  unsigned char* staged = Scratch(widen ? count * es : 0, base * es, &slice);
  const void* in = send;
  void* out = recv;
  if (widen) {
    ToAccum(t, send, staged, count);
    in = out = staged;
  }
  RETURN_IF_ERROR(AllReducePieces(PlanHierPieces(count, es, node_->size(), piece_bytes_), in, out, slice, w, sop));
  if (tail > 0) {
    const size_t at = base * L * es;
    RETURN_IF_ERROR(Step("all_reduce", 1, false, node_->AllReduce(At(in, at), At(out, at), tail, w, sop, nullptr)));
    RETURN_IF_ERROR(Step("all_reduce", 2, true, cross_->AllReduce(At(out, at), At(out, at), tail, w, sop, nullptr)));
  }
  if (widen || op == RedOp::kAvg) FromAccum(t, op, topo_.size(), out, recv, count);
  return absl::OkStatus();
}

// Piece k's slice lies at slice + first / L: the slices of all pieces side by
// side, so a piece's node reduce-scatter never writes what another piece's
// inter-node all-reduce or all-gather is using. The inter-node all-reduces
// run in piece order on `across_`, one at a time (the inter-node
// communicator's calls keep their order); this thread runs the node steps in
// the order reduce-scatter k, all-gather k-1, so the network always has the
// next piece queued while the node works.
absl::Status Hierarchy::AllReducePieces(const std::vector<HierPiece>& pieces, const void* in, void* out,
                                        unsigned char* slice, DataType w, RedOp op) {
  const size_t es = ElementSize(w);
  const size_t L = static_cast<size_t>(node_->size());
  auto reduce = [&](const HierPiece& p) {
    return Step("all_reduce", 1, false, node_->ReduceScatter(At(in, p.first * es), slice + p.first / L * es,
                                                             p.count / L, w, op, nullptr));
  };
  auto across = [&](const HierPiece& p) {
    unsigned char* mine = slice + p.first / L * es;
    return Step("all_reduce", 2, true, cross_->AllReduce(mine, mine, p.count / L, w, op, nullptr));
  };
  auto gather = [&](const HierPiece& p) {
    return Step("all_reduce", 3, false,
                node_->AllGather(slice + p.first / L * es, At(out, p.first * es), p.count / L, w, nullptr));
  };
  if (pieces.size() <= 1) {
    for (const HierPiece& p : pieces) {
      RETURN_IF_ERROR(reduce(p));
      RETURN_IF_ERROR(across(p));
      RETURN_IF_ERROR(gather(p));
    }
    return absl::OkStatus();
  }
  if (across_ == nullptr) across_ = std::make_unique<HostStream>();
  // Each piece's inter-node result, written by the stream before its mark.
  std::vector<absl::Status> crossed(pieces.size());
  std::vector<uint64_t> marks(pieces.size());
  size_t issued = 0;
  auto gathered = [&](size_t k) {
    across_->WaitFor(marks[k]);
    RETURN_IF_ERROR(crossed[k]);
    return gather(pieces[k]);
  };
  absl::Status s;
  for (size_t k = 0; k < pieces.size() && s.ok(); ++k) {
    s = reduce(pieces[k]);
    if (!s.ok()) break;
    across_->Enqueue([&, k] { return crossed[k] = across(pieces[k]); });
    marks[k] = across_->Mark();
    issued = k + 1;
    if (k > 0) s = gathered(k - 1);
  }
  if (s.ok()) s = gathered(pieces.size() - 1);
  if (!s.ok() && issued > 0) {
    // The world is broken by this failure: stop the queued pieces rather than
    // let each wait out its timeout, then let the stream drain.
    cross_->Abort();
  }
  // The stream's error (a piece's) is already in `s` or in `crossed`.
  static_cast<void>(across_->Synchronize());
  return s;
}

absl::Status Hierarchy::ReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op) {
  const bool widen = StagesWiden(t, op);
  const DataType w = widen ? AccumType(t) : t;
  const RedOp sop = StepOp(op);
  const size_t es = ElementSize(w), ts = ElementSize(t);
  const int K = topo_.nodes(), L = node_->size();
  const size_t block = recvcount * es;
  // Arranged as [local rank][node]: the node's reduce-scatter hands local
  // rank l the blocks bound for every node's local rank l.
  unsigned char* partial = nullptr;
  unsigned char* arranged =
      Scratch(static_cast<size_t>(K) * static_cast<size_t>(L) * block, static_cast<size_t>(K) * block, &partial);
  for (int l = 0; l < L; ++l) {
    for (int n = 0; n < K; ++n) {
      const size_t from = static_cast<size_t>(topo_.RankAt(n, l)) * recvcount * ts;
      unsigned char* to = arranged + (static_cast<size_t>(l) * static_cast<size_t>(K) + static_cast<size_t>(n)) * block;
      if (widen) {
        ToAccum(t, At(send, from), to, recvcount);
      } else {
        std::memcpy(to, At(send, from), block);
      }
    }
  }
  const size_t node_count = static_cast<size_t>(K) * recvcount;
  RETURN_IF_ERROR(Step("reduce_scatter", 1, false, node_->ReduceScatter(arranged, partial, node_count, w, sop, nullptr)));
  // The inter-node result lands over the first block of `arranged`, free by now.
  void* out = widen ? static_cast<void*>(arranged) : recv;
  RETURN_IF_ERROR(Step("reduce_scatter", 2, true, cross_->ReduceScatter(partial, out, recvcount, w, sop, nullptr)));
  if (widen || op == RedOp::kAvg) FromAccum(t, op, topo_.size(), out, recv, recvcount);
  return absl::OkStatus();
}

absl::Status Hierarchy::AllGather(const void* send, void* recv, size_t sendcount, DataType t) {
  const size_t block = sendcount * ElementSize(t);
  const int K = topo_.nodes(), L = node_->size();
  unsigned char* gathered = nullptr;
  unsigned char* across = Scratch(static_cast<size_t>(K) * block, static_cast<size_t>(K * L) * block, &gathered);
  RETURN_IF_ERROR(Step("all_gather", 1, true, cross_->AllGather(send, across, sendcount, t, nullptr)));
  RETURN_IF_ERROR(
      Step("all_gather", 2, false, node_->AllGather(across, gathered, static_cast<size_t>(K) * sendcount, t, nullptr)));
  // `gathered` is [local rank][node]; the caller's buffer is in rank order.
  for (int l = 0; l < L; ++l) {
    for (int n = 0; n < K; ++n) {
      std::memcpy(At(recv, static_cast<size_t>(topo_.RankAt(n, l)) * block),
                  gathered + (static_cast<size_t>(l) * static_cast<size_t>(K) + static_cast<size_t>(n)) * block,
                  block);
    }
  }
  return absl::OkStatus();
}

absl::Status Hierarchy::Broadcast(const void* send, void* recv, size_t count, DataType t, int root) {
  const int root_node = topo_.node_of[static_cast<size_t>(root)];
  const int root_local = topo_.local_of[static_cast<size_t>(root)];
  if (topo_.local_of[static_cast<size_t>(rank_)] == root_local) {
    RETURN_IF_ERROR(Step("broadcast", 1, true, cross_->Broadcast(rank_ == root ? send : recv, recv, count, t, root_node,
                                                          nullptr)));
  }
  return Step("broadcast", 2, false, node_->Broadcast(recv, recv, count, t, root_local, nullptr));
}

void Hierarchy::Abort() {
  node_->Abort();
  cross_->Abort();
}

}  // namespace p2p
}  // namespace weft

// NodeShm's single-copy collectives (shm.h, cma.h). From cma_bytes() up,
// each rank reads what it needs straight out of its peers' buffers with
// process_vm_readv instead of meeting them every round to pass it through
// the segment: one copy where staging makes two, and three barriers a call
// instead of one a round. That second difference is the larger where the
// cores are busy with a training step: a round-by-round exchange advances
// only while every rank's communicating thread holds a core at the same
// moment, and stalls a scheduler time slice whenever one does not; here
// each rank only needs its share of a core, whenever it gets it.
//
//   all-reduce:     publish the buffers; barrier (with the call check); rank
//                   c reads chunk c of every peer's input, block by block,
//                   and reduces it in rank order into its output; barrier;
//                   every rank reads the other chunks out of the outputs of
//                   the ranks that reduced them; barrier.
//   reduce-scatter: the first half, into the output block.
//   all-gather:     publish; barrier; every rank reads every peer's input
//                   into that peer's block of its output; barrier.
//   broadcast:      publish; barrier; every rank reads the root's input;
//                   barrier.
//
// The chunks and the rank order are the rounds' (shm.cc), so results are
// theirs bit for bit. In place, the barrier after the reductions is what
// lets a rank overwrite its input: every peer has read its chunk of it by
// then. The last barrier keeps every buffer in use until no peer reads it.
// A rank whose read fails still passes every barrier, so that nobody waits
// for it in vain, and marks the call failed in its control page; after the
// last barrier every rank sees the mark and fails the call alike.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "comm/p2p/cma.h"
#include "comm/p2p/shm.h"
#include "core/reduce.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

const unsigned char* At(uint64_t address, size_t offset) {
  return reinterpret_cast<const unsigned char*>(static_cast<uintptr_t>(address)) + offset;
}

// How much of each peer's input one block of ReduceFromPeers reads: about 1
// MiB in all, so that the blocks and the output being written stay in L2.
size_t BlockBytes(int peers) {
  return std::clamp<size_t>((size_t{1} << 20) / static_cast<size_t>(peers), 64 << 10, 512 << 10);
}

}  // namespace

absl::Status NodeShm::MeetCma(const Call& call, const void* send, const void* recv, const Patience& w) {
  CmaCallWord(rank_, 0).store(reinterpret_cast<uintptr_t>(send), std::memory_order_relaxed);
  CmaCallWord(rank_, 1).store(reinterpret_cast<uintptr_t>(recv), std::memory_order_relaxed);
  ++cma_calls_;
  return Meet(call, w);  // its barrier's release and acquire publish the words
}

absl::Status NodeShm::EndCma(absl::Status mine, const Patience& w) {
  if (!mine.ok()) CmaCallWord(rank_, 2).store(cma_calls_, std::memory_order_relaxed);
  RETURN_IF_ERROR(FlagBarrier(w));
  if (!mine.ok()) return mine;
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && CmaCallWord(q, 2).load(std::memory_order_relaxed) == cma_calls_) {
      return RemoteError("rank %d: rank %d failed to read its peers' buffers in this collective (its own error "
                         "says why)", rank_, q);
    }
  }
  return absl::OkStatus();
}

absl::Status NodeShm::ReduceFromPeers(size_t at, const void* send, void* out, size_t n, DataType t, RedOp op) {
  const size_t es = ElementSize(t);
  const size_t block = std::max<size_t>(BlockBytes(size_ - 1) / es, 1);
  cma_scratch_.resize(static_cast<size_t>(size_ - 1) * block * es);
  auto scratch = [&](int q) { return cma_scratch_.data() + static_cast<size_t>(q < rank_ ? q : q - 1) * block * es; };
  const auto* own = static_cast<const unsigned char*>(send);
  auto* to = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < n; i += block) {
    const size_t m = std::min(block, n - i);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const unsigned char* remote = At(CmaCallWord(q, 0).load(std::memory_order_relaxed), (at + i) * es);
      RETURN_IF_ERROR(Annotate(CmaRead(Pid(q), remote, scratch(q), m * es),
                               absl::StrFormat("rank %d reading rank %d's input", rank_, q)));
    }
    auto src = [&](int q) -> const void* { return q == rank_ ? own + (at + i) * es : scratch(q); };
    ReduceBlocked(t, op, size_, src, m, to + i * es);
  }
  return absl::OkStatus();
}

absl::Status NodeShm::AllReduceCma(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   const Patience& w) {
  const size_t es = ElementSize(t);
  auto* out = static_cast<unsigned char*>(recv);
  RETURN_IF_ERROR(MeetCma(MakeCall(CallKind::kAllReduce, t, count, op), send, recv, w));
  const size_t b = ChunkBegin(count, rank_, size_), e = ChunkBegin(count, rank_ + 1, size_);
  absl::Status s = ReduceFromPeers(b, send, out + b * es, e - b, t, op);
  RETURN_IF_ERROR(FlagBarrier(w));
  // Starting at the next rank, so that ranks do not all read one peer at once.
  for (int i = 1; i < size_ && s.ok(); ++i) {
    const int q = (rank_ + i) % size_;
    const size_t qb = ChunkBegin(count, q, size_), qe = ChunkBegin(count, q + 1, size_);
    if (qe == qb) continue;
    s = Annotate(CmaRead(Pid(q), At(CmaCallWord(q, 1).load(std::memory_order_relaxed), qb * es), out + qb * es,
                         (qe - qb) * es),
                 absl::StrFormat("rank %d reading rank %d's output", rank_, q));
  }
  return EndCma(s, w);
}

absl::Status NodeShm::ReduceScatterCma(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       const Patience& w) {
  RETURN_IF_ERROR(MeetCma(MakeCall(CallKind::kReduceScatter, t, recvcount, op), send, recv, w));
  return EndCma(ReduceFromPeers(static_cast<size_t>(rank_) * recvcount, send, recv, recvcount, t, op), w);
}

absl::Status NodeShm::AllGatherCma(const void* send, void* recv, size_t sendcount, DataType t, const Patience& w) {
  const size_t block = sendcount * ElementSize(t);
  auto* out = static_cast<unsigned char*>(recv);
  RETURN_IF_ERROR(MeetCma(MakeCall(CallKind::kAllGather, t, sendcount), send, recv, w));
  unsigned char* own = out + static_cast<size_t>(rank_) * block;
  if (own != send) std::memcpy(own, send, block);
  absl::Status s;
  for (int i = 1; i < size_ && s.ok(); ++i) {
    const int q = (rank_ + i) % size_;
    s = Annotate(CmaRead(Pid(q), At(CmaCallWord(q, 0).load(std::memory_order_relaxed), 0),
                         out + static_cast<size_t>(q) * block, block),
                 absl::StrFormat("rank %d reading rank %d's input", rank_, q));
  }
  return EndCma(s, w);
}

absl::Status NodeShm::BroadcastCma(const void* send, void* recv, size_t count, DataType t, int root,
                                   const Patience& w) {
  RETURN_IF_ERROR(MeetCma(MakeCall(CallKind::kBroadcast, t, count, RedOp::kSum, root), send, recv, w));
  absl::Status s;
  if (rank_ != root) {
    s = Annotate(CmaRead(Pid(root), At(CmaCallWord(root, 0).load(std::memory_order_relaxed), 0), recv,
                         count * ElementSize(t)),
                 absl::StrFormat("rank %d reading root %d's input", rank_, root));
  }
  return EndCma(s, w);
}

}  // namespace p2p
}  // namespace weft

// The personalised collectives of the point-to-point backends (MPI, UCX):
// gather, scatter, all-to-all (even or not), reduce to a root, and the
// receiving end of an eager send (outbox.h), as schedules for the backend's
// engine (collectives.h).
//
// ExchangeSchedule: one block to and one block from each peer. Lane k
// (k = 0..N-2) sends this rank's block for rank+k+1 and receives the block
// of rank-k-1, both cut into segments, one segment of each per step, on tag
// k at both ends: the lane that sends to a peer is the lane on which that
// peer receives from us, so a pair's segments match in order. Every lane is
// in flight at once, so a rank has at most one segment on the wire to and
// from each peer. A block of 0 bytes moves nothing; a rank's block to itself
// is the caller's copy.
//
// Reduce: up to Engine::direct_bytes, the root receives every input and
// combines them in rank order 0..N-1 (as the direct all-reduce does); above,
// the ring's reduce-scatter phase leaves chunk c reduced on rank c and an
// exchange gathers the chunks to the root. Either way the root's result does
// not depend on timing: the same inputs give the same bits on every run.
//
//   RETURN_IF_ERROR(p2p::Gather(engine, send, recv, block_bytes, root));
#ifndef WEFT_COMM_P2P_EXCHANGE_H_
#define WEFT_COMM_P2P_EXCHANGE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "comm/p2p/collectives.h"
#include "comm/p2p/schedule.h"
#include "core/dtype.h"

namespace weft {
namespace p2p {

// Point-to-point messages (eager sends and their receives) travel apart
// from every collective's: a Transfer's tag with this bit set is the user's
// tag below it, in a tag space of its own on the wire (MPI: a duplicate of
// the communicator; UCX: this bit of its 24-bit tag field, above every
// collective's tag: a lane, a slot or a step, below the rank count or the
// window), so no tag a user picks can meet a collective's message.
inline constexpr int kUserTagBit = 1 << 23;
inline constexpr int UserTag(int tag) { return kUserTagBit | tag; }
// The tag of the calls' fingerprints (check.h), within MPI's guaranteed
// tag range.
inline constexpr int kCheckTag = 32766;

class ExchangeSchedule final : public Schedule {
 public:
  // blocks[q]: what goes to peer q and what comes from it (q == rank: unused).
  struct Block {
    const void* send = nullptr;
    size_t send_bytes = 0;
    void* recv = nullptr;
    size_t recv_bytes = 0;
  };
  ExchangeSchedule(int rank, int size, std::vector<Block> blocks, size_t segment_bytes);
  size_t lanes() const override { return static_cast<size_t>(size_ - 1); }
  int steps() const override { return steps_; }
  Transfer Post(size_t lane, int slot, int step) override;
  void Complete(size_t, int, int) override {}
  int window() const { return std::max(size_ - 1, 1); }

 private:
  const int rank_, size_;
  const std::vector<Block> blocks_;
  const size_t seg_;
  int steps_ = 0;
};

absl::Status Gather(const Engine& e, const void* send, void* recv, size_t block_bytes, int root);
absl::Status Scatter(const Engine& e, const void* send, void* recv, size_t block_bytes, int root);
// Counts and displacements in elements of `t`.
absl::Status AllToAllv(const Engine& e, const void* send, const std::vector<size_t>& sendcounts,
                       const std::vector<size_t>& sdispls, void* recv, const std::vector<size_t>& recvcounts,
                       const std::vector<size_t>& rdispls, DataType t);
absl::Status Reduce(const Engine& e, const void* send, void* recv, size_t count, DataType t, RedOp op, int root);
// The receiving end of an eager send of `bytes` from `from` on the user's
// `tag`, which the sender cut into messages of at most `message_bytes`
// (Outbox): they are received one after another, in order, on UserTag(tag).
// `from` kAnySource: the first message from any rank, the rest from its
// sender. The sender goes to *source (when not null) once all are in.
absl::Status Receive(const Engine& e, void* recv, size_t bytes, int from, int tag, size_t message_bytes,
                     int* source = nullptr);

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_EXCHANGE_H_

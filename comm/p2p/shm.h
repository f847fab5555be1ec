// Collectives through shared memory, for a communicator whose ranks all
// run on one node: the fast path there of both point-to-point backends (MPI,
// UCX), which only differ in how the segment is set up (ShmBootstrap).
//
// Point-to-point between processes on one node costs a rendezvous and a
// system call per message (Open MPI's vader moves anything above 4 KiB with
// process_vm_readv), which dominates small and mid-sized collectives. Here
// each rank owns three staging buffers in one shared segment, and ranks only
// meet at flag barriers in user space. A message runs in rounds of up to
// `round_bytes`:
//
//   all-reduce: every rank copies round k into its buffer (all but its own
//     chunk, which only it reads, straight from the input); barrier; rank c
//     reduces chunk c of round k over every rank's buffer in rank order
//     0..N-1 in one pass, writes the result into its own buffer's chunk c
//     and its output, and copies in round k+1; barrier; every rank copies
//     the other chunks of round k's result out of their reducers' buffers,
//     then reduces round k+1, ... (R rounds, R+1 barriers). Per round a
//     rank moves its share of the chunks once in and its output once out,
//     the least a staged exchange can.
//   reduce-scatter: copy in the other ranks' blocks; barrier; reduce own
//     block out.
//   all-gather:     copy in; barrier (copying its own block out while it
//     waits); copy every other rank's block out.
//   broadcast:      the root copies in; barrier; the others copy out.
//
// Rounds take the three buffers in turn, across calls too. A round's
// buffer is written again three rounds later, and every read of it comes
// before a barrier that the writer has passed, so one barrier per round
// suffices. Each chunk is reduced on one rank in one order and copied by
// all: results are bit-identical across ranks. Barriers wait with the point-to-point backoff (spin, yield, sleep),
// time out after the communicator's timeout and end at once on abort.
//
// Before it trusts a peer's data, every call checks that all ranks made the
// same call: each rank writes its fingerprint (check.h) into its control
// page before the call's first barrier, and after it every rank reads all
// of them and reaches the same verdict (InvalidUsage on every rank when
// they differ, before any rank reads another's buffer). WEFT_CHECK_CALLS=0
// skips the check.
//
// The segment is a POSIX shared-memory file that rank 0 creates, every rank
// maps, and rank 0 unlinks as soon as all have mapped it: nothing is left
// behind when a process dies, and closing is local (munmap), so destroying
// a communicator never waits for its peers.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<NodeShm> shm, NodeShm::Create(rank, size, round_bytes, bootstrap));
//   if (shm) RETURN_IF_ERROR(shm->AllReduce(send, recv, count, t, op, patience));
#ifndef WEFT_COMM_P2P_SHM_H_
#define WEFT_COMM_P2P_SHM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/direct.h"
#include "comm/p2p/backoff.h"
#include "comm/p2p/check.h"
#include "comm/p2p/hang.h"
#include "core/dtype.h"

namespace weft {
namespace p2p {

// What NodeShm::Create needs from the communicator being made: its backend's
// own means (MPI calls for the MPI backend, the point-to-point engine for
// UCX). Each is collective over the communicator.
struct ShmBootstrap {
  // Whether every rank runs on this node.
  std::function<absl::StatusOr<bool>()> all_on_one_node;
  // bytes[0, n) from rank 0 to every rank.
  std::function<absl::Status(void* bytes, size_t n)> broadcast;
  // *v becomes the least over ranks.
  std::function<absl::Status(int* v)> all_min;
};

class NodeShm {
 public:
  // Collective (through `bootstrap`). nullptr (and OK) when the ranks are
  // not all on one node or the segment cannot be created on some rank (say
  // /dev/shm is full): the caller keeps using point-to-point. An error only
  // when the agreement itself fails.
  static absl::StatusOr<std::unique_ptr<NodeShm>> Create(int rank, int size, size_t round_bytes,
                                                         const ShmBootstrap& bootstrap);
  ~NodeShm();
  NodeShm(const NodeShm&) = delete;
  NodeShm& operator=(const NodeShm&) = delete;

  size_t round_bytes() const { return round_bytes_; }

  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, const Patience& w);
  // The same over a buffer that lies in pieces (DirectReduce::AllReducePieces):
  // the rounds are staged from the pieces and copied out into them, so the
  // reducer's separate gradients need no bucket copy on top of the staging.
  absl::Status AllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op, const Patience& w);
  // DirectReduce::AllReduceReady's agreement and reduction: each rank's
  // {offer, reduced, upto} go into its control page before one barrier,
  // every rank takes the least offer (and checks the others agree), then
  // [reduced, least offer) of `data` is all-reduced in place.
  absl::StatusOr<size_t> AllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t, RedOp op,
                                        const Patience& w);
  absl::Status ReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                             const Patience& w);
  // Fills every rank's block of `recv`, this rank's own from `send` (unless
  // it is already there: in place).
  absl::Status AllGather(const void* send, void* recv, size_t sendcount, DataType t, const Patience& w);
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType t, int root, const Patience& w);
  absl::Status Barrier(const Patience& w);
  // One barrier that checks `call` (a collective that moves its bytes some
  // other way: the point-to-point schedules on this node).
  absl::Status Check(const Call& call, const Patience& w);
  // Where rank q publishes its progress (hang.h): its control page.
  ProgressWords* ProgressOf(int q) const;
  // The hang watch's view of the peers: their control pages and pids. It
  // reads this segment, so it must not outlive this object.
  std::unique_ptr<Board> MakeBoard() const;

 private:
  NodeShm(int rank, int size, size_t round_bytes, void* base, size_t mapped);
  // Every rank's flag barrier. `meanwhile` runs once this rank has raised
  // its flag and before it waits for the others': work of its own that no
  // peer waits for (copying its result to its output) fills the time the
  // last rank takes to arrive.
  absl::Status FlagBarrier(const Patience& w, absl::FunctionRef<void()> meanwhile);
  absl::Status FlagBarrier(const Patience& w) { return FlagBarrier(w, [] {}); }
  // The first barrier of a call: publishes `call`, passes the barrier and
  // compares every rank's (unless WEFT_CHECK_CALLS=0).
  absl::Status Meet(const Call& call, const Patience& w, absl::FunctionRef<void()> meanwhile);
  absl::Status Meet(const Call& call, const Patience& w) { return Meet(call, w, [] {}); }
  // A wait for rank q (its control region) that ended with `s`: says so
  // when q's process has exited.
  absl::Status PeerGone(void* region, int q, const absl::Status& s) const;
  // Rank q's staging buffer for round `round` (counted across calls).
  unsigned char* Buf(int q, uint64_t round) const;
  // The all-reduce of `count` elements: read(off, n, dst) stages logical
  // elements [off, off + n), write(src, off, n) stores results. `direct`,
  // when not null, is the input as one buffer, where this rank reads its own
  // chunk instead of staging it.
  absl::Status AllReduceRounds(const Call& call, size_t count, DataType t, RedOp op, const Patience& w,
                               const unsigned char* direct,
                               absl::FunctionRef<void(size_t, size_t, unsigned char*)> read,
                               absl::FunctionRef<void(const unsigned char*, size_t, size_t)> write);
  // out[0..n) = op over q = 0..size-1 of src(q)[0..n), in rank order
  // (ReduceBlocked); `out` may be any of the sources.
  template <typename SrcFn>
  void Reduce(DataType t, RedOp op, SrcFn src, size_t n, void* out);

  const int rank_, size_;
  const size_t round_bytes_;
  void* const base_;
  const size_t mapped_;
  uint64_t epoch_ = 0;  // barriers passed, the same count on every rank
  uint64_t round_ = 0;  // rounds run, the same count on every rank
  uint64_t ready_calls_ = 0;  // AllReduceReady agreements, the same count on every rank
  const bool check_;  // WEFT_CHECK_CALLS
  uint64_t calls_ = 0;  // calls checked, the same count on every rank
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_SHM_H_

// Direct-buffer reductions: an optional interface a backend may offer beside
// the collectives every backend implements (comm/communicator.h).
//
// Two all-reduces work on the caller's buffers where they lie, which only a
// backend that moves the bytes itself can do. They exist for the DDP reducer
// (shard/reducer.h), which asks for them once, when it lays out its buckets,
// and plans its segments around what it found:
//   - AllReducePieces: a buffer that lies in pieces (separate gradients,
//     averaged without a copy into a bucket and back);
//   - AllReduceReady: a buffer still being filled in order (a bucket of
//     views), reducing as much as every rank has ready when the call runs.
// A backend offers them by deriving from DirectReduce as well as from
// Communicator and overriding the Do* hooks and capability flags it does
// better than the defaults; FindDirectReduce says whether a communicator
// does. The in-process backend and the point-to-point backends (MPI, UCX)
// offer them; NCCL does not (on CUDA memory the host cannot tell what a
// stream has produced).
//
//   DirectReduce* direct = FindDirectReduce(*comm);  // nullptr: not offered
//   if (direct != nullptr && direct->ReducesPieces()) {
//     ASSIGN_OR_RETURN(PieceList list, direct->CheckPieces(pieces, DataType::kFloat32));
//     RETURN_IF_ERROR(direct->AllReducePieces(list, RedOp::kAvg, nullptr));  // every step
//   }
#ifndef WEFT_COMM_DIRECT_H_
#define WEFT_COMM_DIRECT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/dtype.h"

namespace weft {

// One piece of a buffer that lies in pieces (AllReducePieces): elements
// [offset, offset + count) of the logical buffer, read from `send` and
// written to `recv` (equal: in place).
struct Piece {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t offset = 0;
  size_t count = 0;
};

// A hash of pieces' offsets and counts, which ranks compare to agree that
// they pass the same layout.
uint64_t PartsLayout(const std::vector<Piece>& pieces);

// Pieces checked once (DirectReduce::CheckPieces) and shared, not copied, by
// every call that reduces them: a caller that reduces the same pieces every
// step (the reducer's segments) pays the checks once, like a copy plan.
class PieceList {
 public:
  PieceList() = default;  // no pieces
  const std::vector<Piece>& pieces() const;
  bool empty() const { return list_ == nullptr || list_->empty(); }
  DataType dtype() const { return dtype_; }

 private:
  friend class DirectReduce;
  std::shared_ptr<const std::vector<Piece>> list_;
  DataType dtype_ = DataType::kFloat32;
  MemKind memory_ = MemKind::kHost;
};

// A buffer that its owner fills in order while it is being all-reduced
// (DirectReduce::AllReduceReady): the reducer's bucket in gradient-as-
// bucket-view mode, whose gradients backward writes one after another. The
// owner says how far it has filled; the calls reduce what every rank has
// filled when they run and record how far they got. Each rank has its own.
// It may lie in parts (the reducer's buckets of one dtype, in bucket
// order): elements [parts[i].offset, + parts[i].count) of the logical
// buffer are at parts[i].recv, and every rank's parts must have the same
// offsets and counts.
class ReadyBuffer {
 public:
  ReadyBuffer(void* data, size_t count, DataType t);
  // parts: non-empty, each with recv == send (in place), in order and
  // back to back from offset 0 (DirectReduce::AllReduceReady checks).
  ReadyBuffer(std::vector<Piece> parts, DataType t);
  ReadyBuffer(const ReadyBuffer&) = delete;
  ReadyBuffer& operator=(const ReadyBuffer&) = delete;
  void* data() const { return parts_.front().recv; }  // the first part's
  const std::vector<Piece>& parts() const { return parts_; }
  size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }
  // The owner: elements [0, end) hold this rank's input (clamped to
  // count()). Only grows until Reset; any thread.
  void SetReady(size_t end);
  size_t ready() const { return ready_.load(std::memory_order_acquire); }
  // [0, reduced()) holds the result. The calls advance it, one at a time in
  // issue order; read it once they are done (say, after the host stream's
  // Synchronize).
  size_t reduced() const { return reduced_; }
  // Calls so far, and those that found their part already reduced by an
  // earlier one (merged into it).
  uint64_t calls() const { return calls_; }
  uint64_t merged() const { return merged_; }
  // Starts over (ready, reduced and the counts at 0): only while no call on
  // this buffer is pending.
  void Reset();

 private:
  friend class DirectReduce;
  const std::vector<Piece> parts_;
  const size_t count_;
  const DataType dtype_;
  std::atomic<size_t> ready_{0};
  size_t reduced_ = 0;
  uint64_t calls_ = 0;
  uint64_t merged_ = 0;
  std::atomic<const Communicator*> checked_for_{nullptr};  // where the parts passed the buffer check
};

class DirectReduce {
 public:
  DirectReduce(const DirectReduce&) = delete;
  DirectReduce& operator=(const DirectReduce&) = delete;

  // An all-reduce of a buffer that lies in pieces: every rank passes the
  // same offsets and counts (ascending, not overlapping) with its own
  // pointers, and no piece's memory overlaps another's. Only where
  // ReducesPieces(): in-process ranks reduce each piece where it lies, MPI
  // or UCX ranks on one node stage their shared-memory rounds (comm/p2p)
  // from the pieces and store into them. Elsewhere it is Unsupported; pack
  // the pieces and call Communicator::AllReduce. `stream` as for
  // Communicator::AllReduce; the call keeps the communicator's issue order.
  absl::Status AllReducePieces(std::vector<Piece> pieces, DataType t, RedOp op, void* stream);
  absl::Status AllReducePieces(const PieceList& pieces, RedOp op, void* stream);
  // The checks of AllReducePieces, once: ascending offsets, counts that fit,
  // buffers of the communicator's memory, and no piece's memory (send or
  // recv) overlapping another's. Errors name a piece by label(i) ("piece i"
  // by default).
  absl::StatusOr<PieceList> CheckPieces(std::vector<Piece> pieces, DataType t,
                                        const std::function<std::string(size_t)>& label = nullptr) const;
  virtual bool ReducesPieces() const { return false; }

  // An in-place all-reduce of a buffer that is still being filled, which
  // reduces as much as every rank has ready when it runs: Horovod's
  // negotiation of what is ready, folded into the collective's own first
  // synchronisation. Each rank offers [reduced, ready); all ranks reduce up
  // to the least `ready` of any rank and advance `reduced` to it. Every
  // rank issues the same calls with the same `upto`, so `reduced` moves
  // alike everywhere, and a call whose [0, upto) an earlier call already
  // reduced does nothing, on every rank (ReadyBuffer::merged). The owner
  // must have made [0, upto) ready by the time the call runs (before issuing
  // it, or in an earlier task on the same host stream); a rank short of it
  // still takes part, reducing what lies there, and the call fails there
  // with InvalidUsage. Host memory only: on CUDA the host cannot tell what a
  // stream has produced when the collective runs.
  absl::Status AllReduceReady(std::shared_ptr<ReadyBuffer> buf, size_t upto, RedOp op, void* stream);
  // Whether the ranks' ready extents ride on the call's own
  // synchronisation (in-process ranks; MPI or UCX ranks on one node), so that
  // AllReduceReady costs what an AllReduce of the same bytes does. Elsewhere
  // it costs one more small all-reduce per call.
  virtual bool AgreesReadyInCall() const { return false; }
  // Whether AllReduceReady on a buffer in parts costs what it costs on one
  // contiguous buffer (in-process ranks reduce each piece where it lies).
  // Elsewhere each part the call reaches is a collective of its own.
  virtual bool ReducesReadyParts() const { return false; }

 protected:
  // `self`: the backend's own Communicator, which the calls check against
  // and issue on.
  explicit DirectReduce(Communicator* self) : self_(*self) {}
  virtual ~DirectReduce() = default;

  // Only where ReducesPieces(); `pieces` checked and non-empty.
  virtual absl::Status DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op);
  // AllReduceReady, where [reduced, upto) is not yet reduced: this rank
  // offers [reduced, offer) of `data` (offer >= upto); agree on the least
  // offer over ranks, reduce [reduced, it) in place, return it. The ranks'
  // `reduced` and `upto` must agree (InvalidUsage on every rank if not).
  // Here: one small all-reduce for the agreement, then the backend's
  // all-reduce.
  virtual absl::StatusOr<size_t> DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                                  RedOp op);
  // The same for a buffer in several parts (`parts` checked: in place, back
  // to back, the same offsets and counts on every rank). Here: the small
  // all-reduce, then one all-reduce per part the agreed extent reaches.
  virtual absl::StatusOr<size_t> DoAllReduceReadyParts(const std::vector<Piece>& parts, size_t reduced, size_t offer,
                                                       size_t upto, DataType t, RedOp op);
  // Agrees on the least offer over ranks (one small all-reduce) and checks
  // that the ranks' `reduced` and `upto` agree.
  // `layout`: a hash of the parts (PartsLayout), 0 for one part.
  absl::StatusOr<size_t> AgreeReady(size_t reduced, size_t offer, size_t upto, uint64_t layout);

 private:
  Communicator& self_;
};

// The communicator's direct-buffer reductions, or nullptr where its backend
// offers none. A caller asks once and keeps the answer.
DirectReduce* FindDirectReduce(Communicator& comm);

}  // namespace weft

#endif  // WEFT_COMM_DIRECT_H_

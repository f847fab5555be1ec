// The communicator: what every backend implements and every layer above uses.
//
// A Communicator is one rank's handle on a group of ranks. Its public methods
// are the checked entry points: they validate arguments (so C++ callers such
// as the reducer get the same errors as the C ABI), honour host streams, and
// keep the communicator's issue order. A backend (comm/<backend>/) fills in
// the Do* hooks, which see only valid arguments:
//
//   - host backends (in-process, MPI, UCX): each Do* runs to completion on the
//     calling thread, in issue order; `stream` is unused.
//   - device backends (NCCL): Do* enqueues on the cudaStream_t `stream`.
//
//   ASSIGN_OR_RETURN(auto comm, InitWorld(Backend::kAuto, options));
//   RETURN_IF_ERROR(comm->AllReduce(buf, buf, n, DataType::kFloat32, RedOp::kAvg, nullptr));
#ifndef WEFT_COMM_COMMUNICATOR_H_
#define WEFT_COMM_COMMUNICATOR_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace weft {

// Values equal weftBackend_t.
enum class Backend : int { kAuto = 0, kInProcess = 1, kMpi = 2, kNccl = 3, kUcx = 4 };
inline constexpr int kNumBackends = 5;
const char* Name(Backend b);

struct CommOptions {
  MemKind memory = MemKind::kHost;
  int timeout_ms = 0;        // resolved: > 0 after ResolveOptions
  size_t segment_bytes = 0;  // 0: the backend's choice
  int cuda_device = -1;
  int bootstrap_timeout_ms = 0;  // resolved: > 0 after ResolveOptions
};

// Fills the zero fields of `o` from the environment (core/env.h).
CommOptions ResolveOptions(CommOptions o);

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

// Pieces checked once (Communicator::CheckPieces) and shared, not copied, by
// every call that reduces them: a caller that reduces the same pieces every
// step (the reducer's segments) pays the checks once, like a copy plan.
class PieceList {
 public:
  PieceList() = default;  // no pieces
  const std::vector<Piece>& pieces() const;
  bool empty() const { return list_ == nullptr || list_->empty(); }
  DataType dtype() const { return dtype_; }

 private:
  friend class Communicator;
  std::shared_ptr<const std::vector<Piece>> list_;
  DataType dtype_ = DataType::kFloat32;
  MemKind memory_ = MemKind::kHost;
};

// A buffer that its owner fills in order while it is being all-reduced
// (Communicator::AllReduceReady): the reducer's bucket in gradient-as-
// bucket-view mode, whose gradients backward writes one after another. The
// owner says how far it has filled; the calls reduce what every rank has
// filled when they run and record how far they got. Each rank has its own.
// It may lie in parts (the reducer's buckets of one dtype, in bucket
// order): elements [parts[i].offset, + parts[i].count) of the logical
// buffer are at parts[i].recv, and every rank's parts must have the same
// offsets and counts.
class Communicator;

class ReadyBuffer {
 public:
  ReadyBuffer(void* data, size_t count, DataType t);
  // parts: non-empty, each with recv == send (in place), in order and
  // back to back from offset 0 (Communicator::AllReduceReady checks).
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
  friend class Communicator;
  const std::vector<Piece> parts_;
  const size_t count_;
  const DataType dtype_;
  std::atomic<size_t> ready_{0};
  size_t reduced_ = 0;
  uint64_t calls_ = 0;
  uint64_t merged_ = 0;
  std::atomic<const Communicator*> checked_for_{nullptr};  // where the parts passed CheckBuffer
};

class Communicator {
 public:
  Communicator(int rank, int size, const CommOptions& options);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  MemKind memory() const { return options_.memory; }
  const CommOptions& options() const { return options_; }
  virtual Backend backend() const = 0;

  // Collectives, with weftAllReduce & co.'s semantics (include/weft/weft.h).
  // `stream`: CUDA memory: a cudaStream_t. Host memory: nullptr (blocking)
  // or a HostStream* (asynchronous; errors go to the stream and async_error).
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void* stream);
  absl::Status ReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op, void* stream);
  absl::Status AllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream);
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType t, int root, void* stream);
  absl::Status Barrier();
  // An all-reduce of a buffer that lies in pieces: every rank passes the
  // same offsets and counts (ascending, not overlapping) with its own
  // pointers, and no piece's memory overlaps another's. Only backends that
  // move the bytes themselves do it (ReducesPieces): in-process ranks reduce
  // each piece where it lies, MPI ranks on one node stage their
  // shared-memory rounds from the pieces and store into them. That is the
  // reducer's separate gradient buffers without a bucket copy in and out.
  // Elsewhere it is Unsupported; pack the pieces and call AllReduce.
  virtual bool ReducesPieces() const { return false; }
  absl::Status AllReducePieces(std::vector<Piece> pieces, DataType t, RedOp op, void* stream);
  absl::Status AllReducePieces(const PieceList& pieces, RedOp op, void* stream);
  // The checks of AllReducePieces, once: ascending offsets, counts that fit,
  // buffers of this communicator's memory, and no piece's memory (send or
  // recv) overlapping another's. Errors name a piece by label(i) ("piece i"
  // by default).
  absl::StatusOr<PieceList> CheckPieces(std::vector<Piece> pieces, DataType t,
                                        const std::function<std::string(size_t)>& label = nullptr) const;
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
  // synchronisation (in-process ranks; MPI ranks on one node), so that
  // AllReduceReady costs what an AllReduce of the same bytes does. Elsewhere
  // it costs one more small all-reduce per call.
  virtual bool AgreesReadyInCall() const { return false; }
  // Whether AllReduceReady on a buffer in parts costs what it costs on one
  // contiguous buffer (in-process ranks reduce each piece where it lies).
  // Elsewhere each part the call reaches is a collective of its own.
  virtual bool ReducesReadyParts() const { return false; }
  // nullptr (and OK) for color < 0.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);

  // Local: later and waiting collectives fail with weftAborted.
  void Abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // The first error of asynchronous work, or OK.
  absl::Status async_error() const;
  void RecordAsyncError(const absl::Status& s);
  // Blocks until every collective issued so far has run.
  void Quiesce();

 protected:
  virtual absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   void* stream) = 0;
  virtual absl::Status DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       void* stream) = 0;
  virtual absl::Status DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) = 0;
  virtual absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                                   void* stream) = 0;
  virtual absl::Status DoBarrier() = 0;
  // Only where ReducesPieces(); `pieces` checked and non-empty.
  virtual absl::Status DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op);
  // AllReduceReady, where [reduced, upto) is not yet reduced: this rank
  // offers [reduced, offer) of `data` (offer >= upto); agree on the least
  // offer over ranks, reduce [reduced, it) in place, return it. The ranks'
  // `reduced` and `upto` must agree (InvalidUsage on every rank if not).
  // Here: one small all-reduce for the agreement, then DoAllReduce.
  virtual absl::StatusOr<size_t> DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                                  RedOp op);
  // The same for a buffer in several parts (`parts` checked: in place, back
  // to back, the same offsets and counts on every rank). Here: the small
  // all-reduce, then one DoAllReduce per part the agreed extent reaches.
  virtual absl::StatusOr<size_t> DoAllReduceReadyParts(const std::vector<Piece>& parts, size_t reduced, size_t offer,
                                                       size_t upto, DataType t, RedOp op);
  // Agrees on the least offer over ranks (one small all-reduce) and checks
  // that the ranks' `reduced` and `upto` agree.
  // `layout`: a hash of the parts (PartsLayout), 0 for one part.
  absl::StatusOr<size_t> AgreeReady(size_t reduced, size_t offer, size_t upto, uint64_t layout);
  virtual absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) = 0;
  // Called once by Abort(): wake anything blocked in the backend.
  virtual void DoAbort() {}

 private:
  // Checks a buffer against the communicator's memory kind.
  absl::Status CheckBuffer(const char* what, const void* p, size_t bytes) const;
  // Runs `op` in issue order: now (stream == nullptr) or on the host stream.
  absl::Status Issue(const char* name, void* stream, std::function<absl::Status()> op);

  const int rank_;
  const int size_;
  const CommOptions options_;
  std::atomic<bool> aborted_{false};

  // Issue order: a ticket per collective, served one at a time.
  std::mutex order_mu_;
  std::condition_variable order_cv_;
  uint64_t next_ticket_ = 0;
  uint64_t serving_ = 0;

  mutable std::mutex error_mu_;
  absl::Status async_error_;
};

}  // namespace weft

#endif  // WEFT_COMM_COMMUNICATOR_H_

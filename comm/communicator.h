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
#include "core/env.h"

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
  WaitPolicy wait = WaitPolicy::kDefault;  // resolved: never kDefault after ResolveOptions
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

// A device backend's group calls (NCCL's ncclGroupStart / ncclGroupEnd),
// registered from its static initializer, so that Communicator::GroupStart
// reaches them without shared code naming the backend.
void RegisterGroupHooks(absl::Status (*start)(), absl::Status (*end)());

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
  // Point-to-point and the rooted and personalised collectives, with
  // weftSend & co.'s semantics. On host memory a send is eager: its bytes
  // are copied out and it completes without waiting for the receiver (the
  // backend delivers it in the background), so ranks that all send before
  // they receive never deadlock; a receive returns once the message is in
  // `recv`. Sends and receives between two ranks match in issue order.
  absl::Status Send(const void* send, size_t count, DataType t, int peer, void* stream);
  absl::Status Recv(void* recv, size_t count, DataType t, int peer, void* stream);
  absl::Status Reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root, void* stream);
  absl::Status Gather(const void* send, void* recv, size_t sendcount, DataType t, int root, void* stream);
  absl::Status Scatter(const void* send, void* recv, size_t recvcount, DataType t, int root, void* stream);
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType t, void* stream);
  // counts and displacements in elements, size() of each; copied before
  // the call returns.
  absl::Status AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                         const size_t* recvcounts, const size_t* rdispls, DataType t, void* stream);
  // NCCL's group calls, per thread: between GroupStart and the matching
  // GroupEnd, calls on host communicators are checked and held, and
  // GroupEnd issues them, sends first (they never wait), then the rest in
  // the order they were made; calls on CUDA communicators go to NCCL, whose
  // own group fuses them. Nested groups end with the outermost GroupEnd.
  static absl::Status GroupStart();
  static absl::Status GroupEnd();
  // An all-reduce of a buffer that lies in pieces: every rank passes the
  // same offsets and counts (ascending, not overlapping) with its own
  // pointers, and no piece's memory overlaps another's. Only backends that
  // move the bytes themselves do it (ReducesPieces): in-process ranks reduce
  // each piece where it lies, MPI or UCX ranks on one node stage their
  // shared-memory rounds (comm/p2p) from the pieces and store into them.
  // That is the reducer's separate gradient buffers without a bucket copy in
  // and out.
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
  // synchronisation (in-process ranks; MPI or UCX ranks on one node), so that
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
  // The point-to-point and rooted hooks. Host backends: DoSend must not wait
  // for the receiver. The defaults refuse (Unsupported, naming the backend).
  virtual absl::Status DoSend(const void* send, size_t count, DataType t, int peer, void* stream);
  virtual absl::Status DoRecv(void* recv, size_t count, DataType t, int peer, void* stream);
  virtual absl::Status DoReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                                void* stream);
  virtual absl::Status DoGather(const void* send, void* recv, size_t sendcount, DataType t, int root, void* stream);
  virtual absl::Status DoScatter(const void* send, void* recv, size_t recvcount, DataType t, int root,
                                 void* stream);
  // All-to-all, even or not: block q of `send` (sendcounts[q] elements at
  // sdispls[q]) goes to rank q, which receives it as its block `rank()`.
  virtual absl::Status DoAllToAllv(const void* send, const std::vector<size_t>& sendcounts,
                                   const std::vector<size_t>& sdispls, void* recv,
                                   const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                                   DataType t, void* stream);
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
  // Inside a group (GroupStart) a host communicator holds it for GroupEnd;
  // `eager` marks a send, which GroupEnd issues first.
  absl::Status Issue(const char* name, void* stream, std::function<absl::Status()> op, bool eager = false);
  absl::Status IssueNow(const char* name, void* stream, std::function<absl::Status()> op);
  // Whether this thread is inside a group; holds a host call for GroupEnd (group.cc).
  static bool InGroup();
  absl::Status Hold(const char* name, void* stream, std::function<absl::Status()> op, bool eager);
  // The checks a rooted call makes of `root`.
  absl::Status CheckRank(const char* call, const char* what, int r) const;

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

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

namespace trace {
class Sink;
}  // namespace trace
class HostStream;

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
  WaitPolicy wait = WaitPolicy::kDefault;  // resolved from WEFT_WAIT; kDefault: the backend's choice
  bool trust_memory = false;  // every buffer is of `memory` (weftConfig_t.trust_memory): CheckBuffer classifies none
};

// Fills the zero fields of `o` from the environment (core/env.h).
CommOptions ResolveOptions(CommOptions o);

// Point-to-point tags are in [0, kMaxTag] (weft/collectives.h's WEFT_TAG_MAX).
inline constexpr int kMaxTag = 32767;
// DoRecv's peer for a receive from any rank (weftRecvAnySource).
inline constexpr int kAnySource = -2;

// A device backend's group calls (NCCL's ncclGroupStart / ncclGroupEnd),
// registered from its static initializer, so that Communicator::GroupStart
// reaches them without shared code naming the backend.
void RegisterGroupHooks(absl::Status (*start)(), absl::Status (*end)());

// What a call is to a communicator's issue order: a send (eager on host
// memory, so GroupEnd issues it first), a receive (of `peer`, kAnySource for
// any rank, and `tag`: ordered only behind the receives it could take a
// message from, where the backend runs receives apart), or any other call.
struct CallRole {
  enum class Kind { kCall, kSend, kReceive };
  Kind kind = Kind::kCall;
  int peer = 0;
  int tag = 0;
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
  // How this communicator moves host bytes ("shm", "p2p"; the backend's
  // name where it has one way), for the timeline.
  virtual const char* engine() const { return Name(backend()); }
  // The timeline this rank records into (core/trace.h), made on first use
  // and shared with its splits; nullptr when WEFT_TRACE is unset.
  trace::Sink* trace();

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
  // `recv`. Sends and receives between two ranks match in issue order, on
  // each tag apart (weftSendTagged's rules); Send and Recv are tag 0.
  absl::Status Send(const void* send, size_t count, DataType t, int peer, void* stream) {
    return SendTagged(send, count, t, peer, 0, stream);
  }
  absl::Status Recv(void* recv, size_t count, DataType t, int peer, void* stream) {
    return RecvTagged(recv, count, t, peer, 0, stream);
  }
  absl::Status SendTagged(const void* send, size_t count, DataType t, int peer, int tag, void* stream);
  absl::Status RecvTagged(void* recv, size_t count, DataType t, int peer, int tag, void* stream);
  // From any rank; *source (may be null) is -1 until the receive completes,
  // then the sender's rank (weftRecvAnySource).
  absl::Status RecvAnySource(void* recv, size_t count, DataType t, int tag, int* source, void* stream);
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
  // for the receiver; a send matches only a receive of its tag, and the
  // messages of one tag between two ranks match in order. DoRecv's peer may
  // be kAnySource: then the first message of the tag from any rank, whose
  // sender goes to *source (when not null). The defaults refuse
  // (Unsupported, naming the backend).
  virtual absl::Status DoSend(const void* send, size_t count, DataType t, int peer, int tag, void* stream);
  virtual absl::Status DoRecv(void* recv, size_t count, DataType t, int peer, int tag, int* source, void* stream);
  // Why this backend matches point-to-point messages by order alone (no
  // tags, no receive from any source), or nullptr where it matches them by
  // tag. The entry points refuse a tag other than 0, and any source, with it
  // before anything is issued.
  virtual const char* TagsUnsupported() const { return nullptr; }
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
  virtual absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) = 0;
  // Called once by Abort(): wake anything blocked in the backend.
  virtual void DoAbort() {}
  // Whether a host DoRecv may run while another Do* of this communicator
  // runs on another thread, another DoRecv included (it shares no unguarded
  // state with them, and the transport takes concurrent callers). Then a
  // host receive waits only for the earlier receives that could take its
  // message, and holds back no other call.
  virtual bool ReceivesApart() const { return false; }

 private:
  // The optional direct-buffer reductions (comm/direct.h) check and issue
  // their calls as the collectives do, and settle ready extents with the
  // backend's all-reduce.
  friend class DirectReduce;
  // Checks a buffer against the communicator's memory kind.
  absl::Status CheckBuffer(const char* what, const void* p, size_t bytes) const;
  // Runs `op` in issue order: now (stream == nullptr) or on the host stream.
  // Inside a group (GroupStart) a host communicator holds it for GroupEnd.
  absl::Status Issue(const char* name, void* stream, std::function<absl::Status()> op,
                     CallRole role = {});
  absl::Status IssueNow(const char* name, void* stream, std::function<absl::Status()> op, CallRole role);
  // IssueNow's path for a receive of a backend that runs them apart.
  absl::Status IssueReceive(const char* name, HostStream* hs, std::function<absl::Status()> op, CallRole role);
  // Whether this thread is inside a group; holds a host call for GroupEnd (group.cc).
  static bool InGroup();
  absl::Status Hold(const char* name, void* stream, std::function<absl::Status()> op, CallRole role);
  // `op` recording itself on the timeline, with what trace::NoteCall noted
  // (comm/trace_call.cc).
  std::function<absl::Status()> Traced(const char* name, void* stream, std::function<absl::Status()> op);
  // A split's timeline is its parent's.
  void InheritTrace(Communicator& parent);
  // The checks a rooted call makes of `root`.
  absl::Status CheckRank(const char* call, const char* what, int r) const;
  // A point-to-point call's tag: in range, and one this backend can match.
  absl::Status CheckTag(const char* call, int tag) const;

  const int rank_;
  const int size_;
  const CommOptions options_;
  std::atomic<bool> aborted_{false};

  // Issue order: a ticket per call, served one at a time. The work holding
  // ticket t waits on turn_cv_[t % kTurns], so serving one ticket wakes the
  // thread whose turn it is, not every host stream with a collective queued
  // (a DDP backward has several buckets in flight, and on a machine whose
  // cores run the backward each needless wake-up takes one from it).
  // order_cv_ is Quiesce's.
  static constexpr size_t kTurns = 8;
  std::mutex order_mu_;
  std::condition_variable order_cv_;
  std::condition_variable turn_cv_[kTurns];
  uint64_t next_ticket_ = 0;
  uint64_t serving_ = 0;
  int quiescing_ = 0;  // threads in Quiesce, under order_mu_
  // Where the backend runs receives apart (ReceivesApart), host receives
  // take no ticket: a receive waits only for the earlier receives that
  // could take its message (same tag; same peer, or either from any rank),
  // which keeps the order messages match in, and holds back no other call
  // (a peer's message may depend on those, as MPI's nonblocking receive and
  // gloo's allow). Those issued and not yet done, in issue order.
  struct PendingReceive {
    uint64_t number;
    int peer;
    int tag;
  };
  std::vector<PendingReceive> receives_;  // under order_mu_
  uint64_t next_receive_ = 0;
  std::condition_variable receive_cv_;
  // Whether an earlier receive in receives_ could take the message of `r`'s.
  bool Behind(const PendingReceive& r) const;

  mutable std::mutex error_mu_;
  absl::Status async_error_;

  std::once_flag trace_once_;
  std::shared_ptr<trace::Sink> trace_;
};

}  // namespace weft

#endif  // WEFT_COMM_COMMUNICATOR_H_

#include "comm/communicator.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/arguments.h"
#include "comm/fault.h"
#include "core/env.h"
#include "core/limits.h"
#include "core/memory.h"
#include "core/status.h"
#include "core/stream.h"
#include "core/trace.h"

namespace weft {

const char* Name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kInProcess: return "inprocess";
    case Backend::kMpi: return "mpi";
    case Backend::kNccl: return "nccl";
    case Backend::kUcx: return "ucx";
  }
  return "invalid";
}

CommOptions ResolveOptions(CommOptions o) {
  const Env& env = Env::Get();
  if (o.timeout_ms <= 0) o.timeout_ms = env.timeout_ms > 0 ? env.timeout_ms : 600000;
  if (o.segment_bytes == 0) o.segment_bytes = env.segment_bytes;
  if (o.bootstrap_timeout_ms <= 0) o.bootstrap_timeout_ms = env.bootstrap_timeout_ms;
  if (o.wait == WaitPolicy::kDefault) o.wait = env.wait;
  return o;
}

Communicator::Communicator(int rank, int size, const CommOptions& options)
    : rank_(rank), size_(size), options_(options) {}

Communicator::~Communicator() {
  if (fault::Armed()) fault::Forget(this);
}

absl::Status Communicator::async_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return async_error_;
}

void Communicator::RecordAsyncError(const absl::Status& s) {
  if (s.ok()) return;
  std::lock_guard<std::mutex> lock(error_mu_);
  if (async_error_.ok()) async_error_ = s;
}

void Communicator::Abort() {
  if (aborted_.exchange(true, std::memory_order_acq_rel)) return;
  DoAbort();
  order_cv_.notify_all();
}

void Communicator::Quiesce() {
  std::unique_lock<std::mutex> lock(order_mu_);
  const uint64_t target = next_ticket_, receives = next_receive_;
  ++quiescing_;
  order_cv_.wait(lock, [&] {
    return serving_ >= target && (receives_.empty() || receives_.front().number >= receives);
  });
  --quiescing_;
}

absl::Status Communicator::CheckBuffer(const char* what, const void* p, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  if (p == nullptr) return InvalidArgument("%s is NULL for a %zu-byte message", what, bytes);
  if (options_.trust_memory) return absl::OkStatus();  // stated by the caller: no driver call
  const PointerKind k = ClassifyPointer(p);
  if (!Compatible(k, memory())) {
    return InvalidArgument("%s = %p is %s memory but this communicator (backend %s) works on %s memory", what, p,
                           Name(k), Name(backend()), Name(memory()));
  }
  return absl::OkStatus();
}

absl::Status Communicator::Issue(const char* name, void* stream, std::function<absl::Status()> op, CallRole role) {
  if (memory() == MemKind::kHost && InGroup()) {
    (void)trace::TakeCall();  // held calls are traced by name when GroupEnd issues them
    return Hold(name, stream, std::move(op), role);
  }
  return IssueNow(name, stream, std::move(op), role);
}

absl::Status Communicator::IssueNow(const char* name, void* stream, std::function<absl::Status()> op,
                                    CallRole role) {
  if (trace::On()) op = Traced(name, stream, std::move(op));
  if (aborted()) return Aborted("%s: the communicator (rank %d) was aborted", name, rank_);
  if (memory() == MemKind::kCuda) {
    // The backend would hand it to NCCL as a cudaStream_t (the kernels refuse it alike).
    if (stream != nullptr && HostStream::Find(stream) != nullptr) {
      return InvalidArgument("%s: stream = %p is a weft host stream, but this communicator (backend %s) works on "
                             "CUDA memory: pass a cudaStream_t, or NULL for the legacy default stream", name, stream,
                             Name(backend()));
    }
    return Annotate(op(), name);  // ordered by the CUDA stream itself
  }

  HostStream* hs = nullptr;
  if (stream != nullptr) {
    hs = HostStream::Find(stream);
    if (hs == nullptr) {
      return InvalidArgument("%s: stream = %p is not a live weft host stream (host memory takes NULL or a "
                             "weftStream_t from weftStreamCreate)", name, stream);
    }
  }
  if (role.kind == CallRole::Kind::kReceive && ReceivesApart()) {
    return IssueReceive(name, hs, std::move(op), role);
  }
  const bool async = hs != nullptr;
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(order_mu_);
    ticket = next_ticket_++;
  }
  // Serving the ticket is the last thing the work does to the communicator:
  // Quiesce (and so weftCommDestroy) may free it as soon as it sees the
  // count, so the async error is recorded before, and the waiters are
  // notified while order_mu_ is held (a waiter cannot return, and the
  // communicator cannot be freed, before this thread lets go of the lock).
  auto run = [this, ticket, name, async, op = std::move(op)]() -> absl::Status {
    std::unique_lock<std::mutex> lock(order_mu_);
    turn_cv_[ticket % kTurns].wait(lock, [&] { return serving_ == ticket; });
    lock.unlock();
    absl::Status s = aborted() ? Aborted("the communicator (rank %d) was aborted", rank_) : op();
    s = Annotate(s, name);
    if (async) RecordAsyncError(s);
    lock.lock();
    ++serving_;
    turn_cv_[serving_ % kTurns].notify_all();  // the next ticket's, and the few sharing its slot
    if (quiescing_ > 0) order_cv_.notify_all();
    return s;
  };
  if (!async) return run();
  hs->Enqueue(std::move(run));
  return absl::OkStatus();
}

bool Communicator::Behind(const PendingReceive& r) const {
  for (const PendingReceive& e : receives_) {
    if (e.number >= r.number) return false;  // in issue order: the rest came after
    if (e.tag == r.tag && (e.peer == r.peer || e.peer == kAnySource || r.peer == kAnySource)) return true;
  }
  return false;
}

absl::Status Communicator::IssueReceive(const char* name, HostStream* hs, std::function<absl::Status()> op,
                                        CallRole role) {
  PendingReceive mine;
  {
    std::lock_guard<std::mutex> lock(order_mu_);
    mine = {next_receive_++, role.peer, role.tag};
    receives_.push_back(mine);  // now: a receive issued later waits for it, even before it runs
  }
  const bool async = hs != nullptr;
  // Leaving receives_ is the last thing it does to the communicator, under
  // order_mu_, as serving a ticket is above.
  auto run = [this, mine, name, async, op = std::move(op)]() -> absl::Status {
    std::unique_lock<std::mutex> lock(order_mu_);
    receive_cv_.wait(lock, [&] { return !Behind(mine); });
    lock.unlock();
    absl::Status s = aborted() ? Aborted("the communicator (rank %d) was aborted", rank_) : op();
    s = Annotate(s, name);
    if (async) RecordAsyncError(s);
    lock.lock();
    receives_.erase(std::find_if(receives_.begin(), receives_.end(),
                                 [&](const PendingReceive& e) { return e.number == mine.number; }));
    receive_cv_.notify_all();  // few receives wait at once; each re-checks what it waits for
    if (quiescing_ > 0) order_cv_.notify_all();
    return s;
  };
  if (!async) return run();
  hs->Enqueue(std::move(run));
  return absl::OkStatus();
}

absl::Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                     void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, &op), "all_reduce"));
  absl::StatusOr<size_t> bytes = Bytes("count", count, 1, t);
  RETURN_IF_ERROR(Annotate(bytes.status(), "all_reduce"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, *bytes), "all_reduce"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *bytes), "all_reduce"));
  if (send != recv && memory() == MemKind::kHost && Overlap(send, *bytes, recv, *bytes)) {
    return InvalidArgument("all_reduce: sendbuf = %p and recvbuf = %p overlap without being equal", send, recv);
  }
  trace::NoteCall(count, static_cast<int>(t), static_cast<int>(op), -1);
  const fault::Call call{send, *bytes, recv, *bytes, t, true};
  return Issue("all_reduce", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoAllReduce(s, recv, count, t, op, stream);
  }));
}

absl::Status Communicator::ReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                         void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, &op), "reduce_scatter"));
  absl::StatusOr<size_t> total = Bytes("recvcount", recvcount, static_cast<size_t>(size_), t);
  RETURN_IF_ERROR(Annotate(total.status(), "reduce_scatter"));
  const size_t block = recvcount * ElementSize(t);
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, *total), "reduce_scatter"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, block), "reduce_scatter"));
  const void* own = static_cast<const char*>(send) + static_cast<size_t>(rank_) * block;
  if (recv != own && memory() == MemKind::kHost && Overlap(send, *total, recv, block)) {
    return InvalidArgument("reduce_scatter: recvbuf = %p overlaps sendbuf = %p but is not its in-place slice %p "
                           "(sendbuf + rank %d * recvcount)", recv, send, own, rank_);
  }
  trace::NoteCall(recvcount, static_cast<int>(t), static_cast<int>(op), -1);
  const fault::Call call{send, *total, recv, block, t, true};
  return Issue("reduce_scatter", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoReduceScatter(s, recv, recvcount, t, op, stream);
  }));
}

absl::Status Communicator::AllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "all_gather"));
  absl::StatusOr<size_t> total = Bytes("sendcount", sendcount, static_cast<size_t>(size_), t);
  RETURN_IF_ERROR(Annotate(total.status(), "all_gather"));
  const size_t block = sendcount * ElementSize(t);
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, block), "all_gather"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *total), "all_gather"));
  const void* own = static_cast<const char*>(recv) + static_cast<size_t>(rank_) * block;
  if (send != own && memory() == MemKind::kHost && Overlap(send, block, recv, *total)) {
    return InvalidArgument("all_gather: sendbuf = %p overlaps recvbuf = %p but is not its in-place slice %p "
                           "(recvbuf + rank %d * sendcount)", send, recv, own, rank_);
  }
  trace::NoteCall(sendcount, static_cast<int>(t), -1, -1);
  const fault::Call call{send, block, recv, *total, t, false};
  return Issue("all_gather", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoAllGather(s, recv, sendcount, t, stream);
  }));
}

absl::Status Communicator::Broadcast(const void* send, void* recv, size_t count, DataType t, int root,
                                     void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "broadcast"));
  if (root < 0 || root >= size_) {
    return InvalidArgument("broadcast: root = %d is outside [0, %d) (the communicator's size)", root, size_);
  }
  absl::StatusOr<size_t> bytes = Bytes("count", count, 1, t);
  RETURN_IF_ERROR(Annotate(bytes.status(), "broadcast"));
  if (rank_ == root) RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, *bytes), "broadcast"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *bytes), "broadcast"));
  if (rank_ == root && send != recv && memory() == MemKind::kHost && Overlap(send, *bytes, recv, *bytes)) {
    return InvalidArgument("broadcast: sendbuf = %p and recvbuf = %p overlap without being equal", send, recv);
  }
  trace::NoteCall(count, static_cast<int>(t), -1, root);
  const fault::Call call{send, *bytes, recv, *bytes, t, false};
  return Issue("broadcast", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoBroadcast(s, recv, count, t, root, stream);
  }));
}

absl::Status Communicator::Barrier() {
  return Issue("barrier", nullptr, fault::Hook(*this, {}, [this](const void*) { return DoBarrier(); }));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  if (color < 0 && color != -1) {
    return InvalidArgument("split: color = %d is negative (use WEFT_SPLIT_NOCOLOR = -1 to opt out)", color);
  }
  if (InGroup()) return InvalidUsage("split: called inside a group (between weftGroupStart and weftGroupEnd)");
  std::unique_ptr<Communicator> out;
  RETURN_IF_ERROR(Issue("split", nullptr, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(out, DoSplit(color, key));
    if (out != nullptr) out->InheritTrace(*this);
    if (fault::Armed()) fault::Inherit(*this, out.get());
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace weft

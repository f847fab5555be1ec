#include "comm/communicator.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/arguments.h"
#include "core/env.h"
#include "core/limits.h"
#include "core/memory.h"
#include "core/status.h"
#include "core/stream.h"

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

Communicator::~Communicator() = default;

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
  const uint64_t target = next_ticket_;
  order_cv_.wait(lock, [&] { return serving_ >= target; });
}

absl::Status Communicator::CheckBuffer(const char* what, const void* p, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  if (p == nullptr) return InvalidArgument("%s is NULL for a %zu-byte message", what, bytes);
  const PointerKind k = ClassifyPointer(p);
  if (!Compatible(k, memory())) {
    return InvalidArgument("%s = %p is %s memory but this communicator (backend %s) works on %s memory", what, p,
                           Name(k), Name(backend()), Name(memory()));
  }
  return absl::OkStatus();
}

absl::Status Communicator::Issue(const char* name, void* stream, std::function<absl::Status()> op, bool eager) {
  if (memory() == MemKind::kHost && InGroup()) return Hold(name, stream, std::move(op), eager);
  return IssueNow(name, stream, std::move(op));
}

absl::Status Communicator::IssueNow(const char* name, void* stream, std::function<absl::Status()> op) {
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
  const bool async = hs != nullptr;
  auto run = [this, ticket, name, async, op = std::move(op)]() -> absl::Status {
    std::unique_lock<std::mutex> lock(order_mu_);
    order_cv_.wait(lock, [&] { return serving_ == ticket; });
    lock.unlock();
    absl::Status s = aborted() ? Aborted("the communicator (rank %d) was aborted", rank_) : op();
    s = Annotate(s, name);
    if (async) RecordAsyncError(s);
    lock.lock();
    ++serving_;
    order_cv_.notify_all();
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
  return Issue("all_reduce", stream, [=, this] { return DoAllReduce(send, recv, count, t, op, stream); });
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
  return Issue("reduce_scatter", stream,
               [=, this] { return DoReduceScatter(send, recv, recvcount, t, op, stream); });
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
  return Issue("all_gather", stream, [=, this] { return DoAllGather(send, recv, sendcount, t, stream); });
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
  return Issue("broadcast", stream, [=, this] { return DoBroadcast(send, recv, count, t, root, stream); });
}

const std::vector<Piece>& PieceList::pieces() const {
  static const std::vector<Piece> kNone;
  return list_ != nullptr ? *list_ : kNone;
}

uint64_t PartsLayout(const std::vector<Piece>& pieces) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the offsets and counts
  for (const Piece& p : pieces) {
    for (uint64_t v : {static_cast<uint64_t>(p.offset), static_cast<uint64_t>(p.count)}) {
      h = (h ^ v) * 0x100000001b3ull;
    }
  }
  return h;
}

absl::StatusOr<PieceList> Communicator::CheckPieces(std::vector<Piece> pieces, DataType t,
                                                    const std::function<std::string(size_t)>& label) const {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "all_reduce_pieces"));
  const auto name = [&](size_t i) { return label ? label(i) : absl::StrFormat("piece %zu", i); };
  struct Span {
    uintptr_t begin, end;
    size_t piece;
  };
  std::vector<Span> spans;  // every piece's memory, for the overlap check
  size_t end = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const std::string what = absl::StrCat("all_reduce_pieces: ", name(i));
    if (p.offset < end) {
      return InvalidArgument("%s starts at element %zu, inside the piece before it (which ends at %zu): pieces must "
                             "ascend without overlapping", what, p.offset, end);
    }
    if (p.count > std::numeric_limits<size_t>::max() - p.offset) {
      return InvalidArgument("%s: offset = %zu + count = %zu overflows", what, p.offset, p.count);
    }
    absl::StatusOr<size_t> bytes = Bytes("count", p.count, 1, t);
    RETURN_IF_ERROR(Annotate(bytes.status(), what));
    RETURN_IF_ERROR(Annotate(CheckBuffer("send", p.send, *bytes), what));
    RETURN_IF_ERROR(Annotate(CheckBuffer("recv", p.recv, *bytes), what));
    if (p.send != p.recv && Overlap(p.send, *bytes, p.recv, *bytes)) {
      return InvalidArgument("%s: send = %p and recv = %p overlap without being equal", what, p.send, p.recv);
    }
    end = p.offset + p.count;
    if (*bytes == 0) continue;
    const auto at = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
    spans.push_back({at(p.recv), at(p.recv) + *bytes, i});
    if (p.send != p.recv) spans.push_back({at(p.send), at(p.send) + *bytes, i});
  }
  // Sorted by start, an overlap shows between neighbours (a piece's own two
  // spans were checked above).
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  for (size_t k = 1; k < spans.size(); ++k) {
    if (spans[k].begin >= spans[k - 1].end) continue;
    return InvalidArgument("all_reduce_pieces: %s and %s overlap in memory (%p and %p)", name(spans[k - 1].piece),
                           name(spans[k].piece), reinterpret_cast<void*>(spans[k - 1].begin),
                           reinterpret_cast<void*>(spans[k].begin));
  }
  PieceList list;
  list.list_ = std::make_shared<const std::vector<Piece>>(std::move(pieces));
  list.dtype_ = t;
  list.memory_ = memory();
  return list;
}

absl::Status Communicator::AllReducePieces(std::vector<Piece> pieces, DataType t, RedOp op, void* stream) {
  ASSIGN_OR_RETURN(PieceList list, CheckPieces(std::move(pieces), t));
  return AllReducePieces(list, op, stream);
}

absl::Status Communicator::AllReducePieces(const PieceList& pieces, RedOp op, void* stream) {
  const DataType t = pieces.dtype();
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, &op), "all_reduce_pieces"));
  if (!ReducesPieces()) {
    return Unsupported("all_reduce_pieces: backend %s does not reduce buffers in pieces; pack them and call "
                       "all_reduce", Name(backend()));
  }
  if (!pieces.empty() && pieces.memory_ != memory()) {
    return InvalidArgument("all_reduce_pieces: the pieces were checked for %s memory but this communicator (backend "
                           "%s) works on %s memory", Name(pieces.memory_), Name(backend()), Name(memory()));
  }
  if (pieces.empty()) return absl::OkStatus();
  return Issue("all_reduce_pieces", stream, [this, list = pieces.list_, t, op] {
    return DoAllReducePieces(*list, t, op);
  });
}

absl::Status Communicator::DoAllReducePieces(const std::vector<Piece>&, DataType, RedOp) {
  return Unsupported("all_reduce_pieces: backend %s does not reduce buffers in pieces", Name(backend()));
}

absl::Status Communicator::Barrier() {
  return Issue("barrier", nullptr, [this] { return DoBarrier(); });
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  if (color < 0 && color != -1) {
    return InvalidArgument("split: color = %d is negative (use WEFT_SPLIT_NOCOLOR = -1 to opt out)", color);
  }
  if (InGroup()) return InvalidUsage("split: called inside a group (between weftGroupStart and weftGroupEnd)");
  std::unique_ptr<Communicator> out;
  RETURN_IF_ERROR(Issue("split", nullptr, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(out, DoSplit(color, key));
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace weft

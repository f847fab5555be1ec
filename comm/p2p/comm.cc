#include "comm/p2p/comm.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/bootstrap/bootstrap.h"
#include "comm/fault.h"
#include "comm/p2p/check.h"
#include "comm/p2p/exchange.h"
#include "comm/p2p/status_channel.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

// Segments past this would overflow MPI's int counts (and any cache).
constexpr size_t kMaxSegmentBytes = size_t{1} << 30;

// What each rank tells the others to find the topology: its node key
// (host name and boot id, padded as comm/ucx does) and its table's hash.
struct NodeEntry {
  char key[320];
  uint64_t table;
};

// Explain's probes after a transport failure: up to 4 more, 50 ms apart.
constexpr int kExplainProbes = 4;
constexpr std::chrono::milliseconds kExplainWait{50};

// Set while a hierarchy splits its world: the communicators it makes are
// its parts, not worlds of their own.
thread_local bool making_hierarchy = false;

}  // namespace

P2pComm::P2pComm(int rank, int size, const CommOptions& options, bool oversubscribed, const Tuning& tuning)
    : Communicator(rank, size, options), DirectReduce(this), tuning_(tuning),
      spin_(oversubscribed ? std::chrono::microseconds(0) : tuning.spin),
      wait_(options.wait != WaitPolicy::kDefault ? options.wait
            : oversubscribed                     ? WaitPolicy::kYield
                                                 : WaitPolicy::kBlock),
      watch_(rank, size), check_(CheckCalls()) {}

P2pComm::~P2pComm() {
  if (broken()) static_cast<void>(scratch_.release());
}

absl::Status P2pComm::AttachSharedMemory(const ShmBootstrap& bootstrap) {
  const size_t round = options().segment_bytes != 0 ? SegmentBytes() : tuning_.shm_round_bytes;
  // A bad WEFT_HIER fails the init after the collective steps, which every
  // rank takes, so that none is left waiting.
  const char* spec = std::getenv("WEFT_HIER");
  const absl::StatusOr<HierTable> table = ParseHierTable(spec == nullptr ? "" : spec);
  ASSIGN_OR_RETURN(shm_, NodeShm::Create(rank(), size(), round, bootstrap));
  RETURN_IF_ERROR(AttachWatch());
  if (shm_ != nullptr || size() == 1 || making_hierarchy) return table.status();
  return AttachHierarchy(table, spec == nullptr ? "" : spec);
}

absl::Status P2pComm::AttachWatch() {
  if (size() == 1) return absl::OkStatus();
  if (shm_ != nullptr) {
    watch_.PublishAt(shm_->ProgressOf(rank()));
    watch_.SetBoard(shm_->MakeBoard());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Board> board,
                   MakeTcpBoard(rank(), size(), &watch_.published(), [this](const void* mine, void* all, size_t n) {
                     return p2p::AllGather(MakeEngine(), mine, all, n, DataType::kUint8);
                   }));
  watch_.SetBoard(std::move(board));
  return absl::OkStatus();
}

absl::Status P2pComm::AttachHierarchy(const absl::StatusOr<HierTable>& table, const char* spec) {
  NodeEntry mine = {};
  const std::string key = bootstrap::NodeKey();
  std::memcpy(mine.key, key.data(), std::min(key.size(), sizeof(mine.key) - 1));
  // A rank with a bad table still takes part, so every rank learns of it.
  mine.table = table.ok() ? table->Hash() : 0;
  std::vector<NodeEntry> all(static_cast<size_t>(size()));
  RETURN_IF_ERROR(p2p::AllGather(MakeEngine(), &mine, all.data(), sizeof(NodeEntry), DataType::kUint8));
  if (!table.ok()) return table.status();
  for (int q = 0; q < size(); ++q) {
    if (all[static_cast<size_t>(q)].table != mine.table) {
      return InvalidArgument("rank %d: WEFT_HIER=\"%s\" here gives another table than rank %d's; it must be the "
                             "same on every rank (%s)", rank(), spec, q,
                             all[static_cast<size_t>(q)].table == 0 ? "that rank's value is bad: see its error"
                                                                    : "each rank would pick its own path");
    }
  }
  std::vector<std::string> keys;
  for (const NodeEntry& e : all) keys.emplace_back(e.key, strnlen(e.key, sizeof(e.key)));
  topo_ = Topology::FromKeys(keys);
  table_ = *table;
  if (!HierarchyApplies(table_, topo_)) {
    Log(LogLevel::kInfo, "rank %d: %s, flat collectives (%s)", rank(), topo_.Describe(),
        topo_.nodes() < 2 ? "one node" : !table_.any() ? "WEFT_HIER=off" : !topo_.uniform()
            ? "the hierarchy needs the same number of ranks on every node" : "one rank per node");
    return absl::OkStatus();
  }
  making_hierarchy = true;
  absl::StatusOr<std::unique_ptr<Hierarchy>> made = Hierarchy::Make(
      rank(), topo_, table_, [this](int color, int key) -> absl::StatusOr<std::unique_ptr<Communicator>> {
        ASSIGN_OR_RETURN(std::unique_ptr<Communicator> part, DoSplit(color, key));
        if (auto* p = dynamic_cast<P2pComm*>(part.get())) {
          p->check_ = false;
          p->watch_.SetWorld(&watch_);  // its waits find a lost node of the world, in world ranks
        }
        // Its calls are steps of the world's: a fault would otherwise take
        // the part's rank for a world rank.
        if (fault::Armed()) fault::Exempt(part.get());
        return part;
      });
  making_hierarchy = false;
  RETURN_IF_ERROR(made.status());
  hier_ = std::move(*made);
  Log(LogLevel::kInfo, "rank %d: %s, hierarchical: %s", rank(), topo_.Describe(), table_.Describe());
  return absl::OkStatus();
}

void P2pComm::DoAbort() {
  if (hier_ != nullptr) hier_->Abort();
}

absl::Status P2pComm::Usable() const {
  if (broken_.ok()) {
    std::lock_guard<std::mutex> lock(outbox_mu_);
    const absl::Status sent = outbox_ != nullptr ? outbox_->status() : absl::OkStatus();
    if (!sent.ok()) {
      return InvalidUsage("rank %d: this communicator is unusable after a send failed (%s); destroy it", rank(),
                          sent.message());
    }
  }
  if (broken_.ok()) return absl::OkStatus();
  return InvalidUsage("rank %d: this communicator is unusable after an earlier failure (%s); destroy it",
                      rank(), broken_.get().message());
}

absl::Status P2pComm::Explain(absl::Status s) const {
  // Timeouts were probed while they waited; refusals and aborts are no death.
  if (s.ok() || absl::IsDeadlineExceeded(s) || absl::IsAborted(s) || absl::IsFailedPrecondition(s) ||
      absl::IsInvalidArgument(s) || IsPeerDead(s)) {
    return s;
  }
  if (!watch_.on()) return s;
  // A peer's transport connection is often reset before its process is
  // seen gone (a killed process's sockets close one by one as it exits), so
  // a failure that finds no death probes again a few times over a short
  // while before it is taken as it is. Only failures pay this.
  absl::Status dead = watch_.ProbeDead(-1);
  for (int i = 0; dead.ok() && i < kExplainProbes; ++i) {
    std::this_thread::sleep_for(kExplainWait);
    dead = watch_.ProbeDead(-1);
  }
  if (dead.ok()) return s;
  return absl::Status(dead.code(), absl::StrCat(dead.message(), " (the transport reported: ", s.message(), ")"));
}

absl::Status P2pComm::Settle(absl::Status s) {
  broken_.Set(s);
  return s;
}

void* P2pComm::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    scratch_.reset(new unsigned char[bytes]);
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

size_t P2pComm::SegmentBytes() const {
  const size_t s = options().segment_bytes;
  return s == 0 ? tuning_.segment_bytes : std::min(s, kMaxSegmentBytes);
}

absl::Status P2pComm::Check(const Call& call) {
  if (!check_ || size() == 1) return absl::OkStatus();
  if (shm_ != nullptr) return Settle(shm_->Check(call, Wait()));
  return Settle(CheckCall(MakeEngine(), Stamp(call, checked_++)));
}

absl::Status P2pComm::SplitBarrier() {
  RETURN_IF_ERROR(Usable());
  if (!check_ || size() == 1) return DoBarrier();
  return Check(MakeCall(CallKind::kSplit, DataType::kUint8, 0));  // a barrier too
}

Engine P2pComm::MakeEngine() {
  return {rank(), size(), SegmentBytes(), DirectBytes(), tuning_.window,
          [this](size_t bytes) { return Scratch(bytes); },
          [this](Schedule& s, int window) { return Run(s, window); },
          options().segment_bytes != 0 ? SegmentBytes() : tuning_.exchange_segment_bytes};
}

// Each collective: the shared-memory rounds when there are any and the call
// moves data between ranks (one rank and empty calls are the schedules'
// trivial cases), else the point-to-point schedules. Empty calls are still
// checked (a barrier's worth): a rank whose peer passed another count may
// wait for data from it, and must fail, not time out or read a later call.

absl::Status P2pComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void*) {
  RETURN_IF_ERROR(Usable());
  const Call call = MakeCall(CallKind::kAllReduce, t, count, op);
  Track(call);
  if (shm_ != nullptr && count > 0) return Finish(Settle(shm_->AllReduce(send, recv, count, t, op, Wait())));
  RETURN_IF_ERROR(Check(call));
  if (Hierarchical(HierKind::kAllReduce, count * ElementSize(t))) {
    return Finish(Settle(hier_->AllReduce(send, recv, count, t, op)));
  }
  return Finish(p2p::AllReduce(MakeEngine(), send, recv, count, t, op));
}

absl::Status P2pComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op, void*) {
  RETURN_IF_ERROR(Usable());
  const Call call = MakeCall(CallKind::kReduceScatter, t, recvcount, op);
  Track(call);
  if (shm_ != nullptr && recvcount > 0) {
    return Finish(Settle(shm_->ReduceScatter(send, recv, recvcount, t, op, Wait())));
  }
  RETURN_IF_ERROR(Check(call));
  if (Hierarchical(HierKind::kReduceScatter, recvcount * static_cast<size_t>(size()) * ElementSize(t))) {
    return Finish(Settle(hier_->ReduceScatter(send, recv, recvcount, t, op)));
  }
  return Finish(p2p::ReduceScatter(MakeEngine(), send, recv, recvcount, t, op));
}

absl::Status P2pComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void*) {
  RETURN_IF_ERROR(Usable());
  const Call call = MakeCall(CallKind::kAllGather, t, sendcount);
  Track(call);
  if (shm_ != nullptr && sendcount > 0) return Finish(Settle(shm_->AllGather(send, recv, sendcount, t, Wait())));
  RETURN_IF_ERROR(Check(call));
  if (Hierarchical(HierKind::kAllGather, sendcount * static_cast<size_t>(size()) * ElementSize(t))) {
    return Finish(Settle(hier_->AllGather(send, recv, sendcount, t)));
  }
  return Finish(p2p::AllGather(MakeEngine(), send, recv, sendcount, t));
}

absl::Status P2pComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root, void*) {
  RETURN_IF_ERROR(Usable());
  const size_t bytes = count * ElementSize(t);
  const Call call = MakeCall(CallKind::kBroadcast, t, count, RedOp::kSum, root);
  Track(call);
  if (shm_ != nullptr && bytes > 0) {
    if (rank() == root) CopyIfDistinct(recv, send, bytes);
    return Finish(Settle(shm_->Broadcast(send, recv, count, t, root, Wait())));
  }
  RETURN_IF_ERROR(Check(call));
  if (Hierarchical(HierKind::kBroadcast, bytes)) return Finish(Settle(hier_->Broadcast(send, recv, count, t, root)));
  return Finish(p2p::Broadcast(MakeEngine(), send, recv, bytes, root));
}

absl::Status P2pComm::DoBarrier() {
  RETURN_IF_ERROR(Usable());
  const Call call = MakeCall(CallKind::kBarrier, DataType::kUint8, 0);
  Track(call);
  if (shm_ != nullptr) return Finish(Settle(shm_->Barrier(Wait())));
  // The check is an all-gather, which no rank leaves before every rank has
  // entered: a barrier of its own.
  if (check_) return Finish(Check(call));
  return Finish(p2p::Barrier(MakeEngine()));
}

absl::Status P2pComm::DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op) {
  RETURN_IF_ERROR(Usable());
  size_t count = 0;
  for (const Piece& p : pieces) count += p.count;
  Track(MakeCall(CallKind::kAllReduce, t, count, op));
  return Finish(Settle(shm_->AllReducePieces(pieces, t, op, Wait())));
}

absl::StatusOr<size_t> P2pComm::DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                                 RedOp op) {
  RETURN_IF_ERROR(Usable());
  if (size() == 1) return offer;
  if (shm_ == nullptr) return DirectReduce::DoAllReduceReady(data, reduced, offer, upto, t, op);
  Track(MakeCall(CallKind::kAllReduceReady, t, upto, op));
  absl::StatusOr<size_t> agreed = shm_->AllReduceReady(data, reduced, offer, upto, t, op, Wait());
  if (agreed.ok()) static_cast<void>(Finish(absl::OkStatus()));
  // Ranks that disagree all fail at the same point, before any round: the
  // communicator is still in step. Anything else breaks it.
  // Ranks that called something else (IsCallMismatch) break it as any
  // other mismatch does: their calls took other steps.
  if (!agreed.ok() && (!absl::IsFailedPrecondition(agreed.status()) || IsCallMismatch(agreed.status()))) {
    return Settle(agreed.status());
  }
  return agreed;
}

absl::Status P2pComm::DoSend(const void* send, size_t count, DataType t, int peer, int tag, void*) {
  RETURN_IF_ERROR(Usable());
  Outbox* outbox;
  {
    std::lock_guard<std::mutex> lock(outbox_mu_);
    if (outbox_ == nullptr) {
      outbox_ = std::make_unique<Outbox>(SendWire(), Wait(), EagerBytes(),
                                         [this](const absl::Status& s) { RecordAsyncError(s); });
    }
    outbox = outbox_.get();
  }
  if (check_) {
    // The header goes first, on the same tag, so it is the receive's first message.
    const Call header = Stamp(MakeCall(CallKind::kSend, t, count), sent_[{peer, tag}]++);
    RETURN_IF_ERROR(outbox->Send(header.words, sizeof(header.words), peer, UserTag(tag)));
  }
  return outbox->Send(send, count * ElementSize(t), peer, UserTag(tag));
}

// From any rank, the first message names the sender (the header, or the
// data's first message without WEFT_CHECK_CALLS), and the rest of the send
// comes from it: a sender's messages of one tag arrive in its order.
absl::Status P2pComm::DoRecv(void* recv, size_t count, DataType t, int peer, int tag, int* source, void*) {
  RETURN_IF_ERROR(Usable());
  // A wait's report (hang.h) speaks of collectives: say which message this one waits for.
  const std::string what = peer == kAnySource ? absl::StrFormat("from any rank on tag %d", tag)
                                              : absl::StrFormat("from rank %d on tag %d", peer, tag);
  int from = peer;
  if (check_) {
    Call got;
    RETURN_IF_ERROR(
        Annotate(p2p::Receive(MakeEngine(), got.words, sizeof(got.words), peer, tag, EagerBytes(), &from), what));
    uint64_t number;
    {
      std::lock_guard<std::mutex> lock(received_mu_);  // receives of other tags or peers run beside this one
      number = received_[{from, tag}]++;
    }
    const Call want = Stamp(MakeCall(CallKind::kSend, t, count), number);
    RETURN_IF_ERROR(Settle(CheckMessage(rank(), from, tag, want, got)));
  }
  RETURN_IF_ERROR(
      Annotate(p2p::Receive(MakeEngine(), recv, count * ElementSize(t), from, tag, EagerBytes(), &from), what));
  if (source != nullptr) *source = from;
  return absl::OkStatus();
}

absl::Status P2pComm::DoReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root, void*) {
  RETURN_IF_ERROR(Usable());
  const Call call = MakeCall(CallKind::kReduce, t, count, op, root);
  Track(call);
  RETURN_IF_ERROR(Check(call));
  return Finish(p2p::Reduce(MakeEngine(), send, recv, count, t, op, root));
}

absl::Status P2pComm::DoGather(const void* send, void* recv, size_t sendcount, DataType t, int root, void*) {
  RETURN_IF_ERROR(Usable());
  const Call call = MakeCall(CallKind::kGather, t, sendcount, RedOp::kSum, root);
  Track(call);
  RETURN_IF_ERROR(Check(call));
  return Finish(p2p::Gather(MakeEngine(), send, recv, sendcount * ElementSize(t), root));
}

absl::Status P2pComm::DoScatter(const void* send, void* recv, size_t recvcount, DataType t, int root, void*) {
  RETURN_IF_ERROR(Usable());
  const Call call = MakeCall(CallKind::kScatter, t, recvcount, RedOp::kSum, root);
  Track(call);
  RETURN_IF_ERROR(Check(call));
  return Finish(p2p::Scatter(MakeEngine(), send, recv, recvcount * ElementSize(t), root));
}

absl::Status P2pComm::DoAllToAllv(const void* send, const std::vector<size_t>& sendcounts,
                                  const std::vector<size_t>& sdispls, void* recv, const std::vector<size_t>& recvcounts,
                                  const std::vector<size_t>& rdispls, DataType t, void*) {
  RETURN_IF_ERROR(Usable());
  // Every rank, whatever its counts: a rank that sends nothing may still be
  // expected to.
  const Call call = MakeAllToAllCall(rank(), t, sendcounts, recvcounts);
  Track(call);
  RETURN_IF_ERROR(Check(call));
  return Finish(p2p::AllToAllv(MakeEngine(), send, sendcounts, sdispls, recv, recvcounts, rdispls, t));
}

}  // namespace p2p
}  // namespace weft

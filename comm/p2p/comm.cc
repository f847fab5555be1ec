#include "comm/p2p/comm.h"

#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

// Segments past this would overflow MPI's int counts (and any cache).
constexpr size_t kMaxSegmentBytes = size_t{1} << 30;

}  // namespace

P2pComm::P2pComm(int rank, int size, const CommOptions& options, const Tuning& tuning)
    : Communicator(rank, size, options), tuning_(tuning) {}

P2pComm::~P2pComm() {
  if (broken()) static_cast<void>(scratch_.release());
}

absl::Status P2pComm::Usable() const {
  if (broken_.ok()) return absl::OkStatus();
  return InvalidUsage("rank %d: this communicator is unusable after an earlier failure (%s); destroy it",
                      rank(), broken_.message());
}

absl::Status P2pComm::Settle(absl::Status s) {
  if (!s.ok() && broken_.ok()) broken_ = s;
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

Engine P2pComm::MakeEngine() {
  return {rank(), size(), SegmentBytes(), DirectBytes(), tuning_.window,
          [this](size_t bytes) { return Scratch(bytes); },
          [this](Schedule& s, int window) { return Run(s, window); }};
}

absl::Status P2pComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void*) {
  RETURN_IF_ERROR(Usable());
  return p2p::AllReduce(MakeEngine(), send, recv, count, t, op);
}

absl::Status P2pComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op, void*) {
  RETURN_IF_ERROR(Usable());
  return p2p::ReduceScatter(MakeEngine(), send, recv, recvcount, t, op);
}

absl::Status P2pComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void*) {
  RETURN_IF_ERROR(Usable());
  return p2p::AllGather(MakeEngine(), send, recv, sendcount, t);
}

absl::Status P2pComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root, void*) {
  RETURN_IF_ERROR(Usable());
  return p2p::Broadcast(MakeEngine(), send, recv, count * ElementSize(t), root);
}

}  // namespace p2p
}  // namespace weft

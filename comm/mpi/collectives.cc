// MPI collectives: each picks a schedule by message size and runs it on the
// polling engine (pipeline.h).
//   direct  (a message of at most Tuning::direct_bytes): every rank sends to
//           every peer at once, one step, and reductions then combine all
//           ranks' data in rank order 0..N-1, the same on every rank;
//   ring    (larger reductions and gathers, ring.h): segmented, pipelined,
//           each chunk reduced on one rank in a fixed order;
//   chain   (larger broadcasts, ring.h): segmented, pipelined.
// Either way every rank ends with the same bits, and the algorithm depends
// only on arguments all ranks share, so all ranks pick the same one.
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/mpi/comm.h"
#include "comm/mpi/ring.h"
#include "core/reduce.h"
#include "core/status.h"

namespace weft {
namespace mpi {
namespace {

// Lane k carries transfers_[k]; one step each, all lanes in flight at once.
class DirectSchedule final : public Schedule {
 public:
  explicit DirectSchedule(std::vector<Transfer> t) : t_(std::move(t)) {}
  size_t lanes() const override { return t_.size(); }
  int steps() const override { return 1; }
  Transfer Post(size_t lane, int, int) override { return t_[lane]; }
  void Complete(size_t, int, int) override {}
  int window() const { return static_cast<int>(std::max<size_t>(t_.size(), 1)); }

 private:
  std::vector<Transfer> t_;
};

// Exchange with every peer: lane k sends to rank+k+1 and receives from
// rank-k-1, tag k at both ends. `send(to)` / `recv(from)` give the buffers.
template <typename SendFn, typename RecvFn>
std::vector<Transfer> PeerExchange(int rank, int size, size_t bytes, SendFn send, RecvFn recv) {
  std::vector<Transfer> v;
  for (int k = 0; k + 1 < size; ++k) {
    Transfer x;
    x.to = (rank + k + 1) % size;
    x.from = (rank - k - 1 + size) % size;
    x.send = send(x.to);
    x.recv = recv(x.from);
    x.send_bytes = x.recv_bytes = bytes;
    x.tag = k;
    v.push_back(x);
  }
  return v;
}

size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

}  // namespace

absl::Status MpiComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void*) {
  RETURN_IF_ERROR(Usable());
  const size_t es = ElementSize(t), bytes = count * es;
  if (size() == 1 || count == 0) {  // avg over one rank is the value itself
    CopyIfDistinct(recv, send, bytes);
    return absl::OkStatus();
  }
  if (shm_ != nullptr) return Settle(shm_->AllReduce(send, recv, count, t, op, Wait()));
  if (bytes <= DirectBytes()) {
    // Peers' inputs land in scratch at their rank's position.
    const size_t peers = AlignUp(bytes * static_cast<size_t>(size()));
    auto* scratch = static_cast<unsigned char*>(Scratch(peers + count * AccumSize(t)));
    DirectSchedule s(PeerExchange(rank(), size(), bytes, [&](int) { return send; },
                                  [&](int from) { return scratch + static_cast<size_t>(from) * bytes; }));
    RETURN_IF_ERROR(Run(s, s.window()));
    auto src = [&](int q) -> const void* { return q == rank() ? send : scratch + static_cast<size_t>(q) * bytes; };
    ReduceInRankOrder(t, op, size(), src, count, scratch + peers, recv);
    return absl::OkStatus();
  }
  RingSchedule::Args a{t, op, rank(), size(), true, true, send, nullptr, recv, count, 0, SegmentBytes(),
                       tuning_.window};
  RingSchedule ring(a, Scratch(RingSchedule::ScratchBytes(a)));
  return Run(ring, tuning_.window);
}

absl::Status MpiComm::DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op) {
  RETURN_IF_ERROR(Usable());
  return Settle(shm_->AllReducePieces(pieces, t, op, Wait()));
}

absl::StatusOr<size_t> MpiComm::DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                                 RedOp op) {
  RETURN_IF_ERROR(Usable());
  if (size() == 1) return offer;
  if (shm_ == nullptr) return Communicator::DoAllReduceReady(data, reduced, offer, upto, t, op);
  absl::StatusOr<size_t> agreed = shm_->AllReduceReady(data, reduced, offer, upto, t, op, Wait());
  // Ranks that disagree all fail at the same point, before any round: the
  // communicator is still in step. Anything else breaks it.
  if (!agreed.ok() && !absl::IsFailedPrecondition(agreed.status())) return Settle(agreed.status());
  return agreed;
}

absl::Status MpiComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                      void*) {
  RETURN_IF_ERROR(Usable());
  const size_t es = ElementSize(t), block = recvcount * es;
  const auto* in = static_cast<const unsigned char*>(send);
  if (size() == 1 || recvcount == 0) {
    CopyIfDistinct(recv, send, block);
    return absl::OkStatus();
  }
  if (shm_ != nullptr) return Settle(shm_->ReduceScatter(send, recv, recvcount, t, op, Wait()));
  if (block <= DirectBytes()) {
    const size_t blocks = AlignUp(block * static_cast<size_t>(size()));
    auto* scratch = static_cast<unsigned char*>(Scratch(blocks + recvcount * AccumSize(t)));
    DirectSchedule s(PeerExchange(rank(), size(), block, [&](int to) { return in + static_cast<size_t>(to) * block; },
                                  [&](int from) { return scratch + static_cast<size_t>(from) * block; }));
    RETURN_IF_ERROR(Run(s, s.window()));
    auto src = [&](int q) -> const void* {
      return (q == rank() ? in : scratch) + static_cast<size_t>(q) * block;
    };
    ReduceInRankOrder(t, op, size(), src, recvcount, scratch + blocks, recv);
    return absl::OkStatus();
  }
  RingSchedule::Args a{t, op, rank(), size(), true, false, send, recv, nullptr, 0, recvcount, SegmentBytes(),
                       tuning_.window};
  RingSchedule ring(a, Scratch(RingSchedule::ScratchBytes(a)));
  return Run(ring, tuning_.window);
}

absl::Status MpiComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void*) {
  RETURN_IF_ERROR(Usable());
  const size_t block = sendcount * ElementSize(t);
  auto* out = static_cast<unsigned char*>(recv);
  CopyIfDistinct(out + static_cast<size_t>(rank()) * block, send, block);
  if (size() == 1 || sendcount == 0) return absl::OkStatus();
  if (shm_ != nullptr) return Settle(shm_->AllGather(send, recv, sendcount, t, Wait()));
  if (block <= DirectBytes()) {
    DirectSchedule s(PeerExchange(rank(), size(), block, [&](int) { return send; },
                                  [&](int from) { return out + static_cast<size_t>(from) * block; }));
    return Run(s, s.window());
  }
  RingSchedule::Args a{t, RedOp::kSum, rank(), size(), false, true, nullptr, nullptr, recv, 0, sendcount,
                       SegmentBytes(), tuning_.window};
  RingSchedule ring(a, nullptr);
  return Run(ring, tuning_.window);
}

absl::Status MpiComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root, void*) {
  RETURN_IF_ERROR(Usable());
  const size_t bytes = count * ElementSize(t);
  if (rank() == root) CopyIfDistinct(recv, send, bytes);
  if (size() == 1 || bytes == 0) return absl::OkStatus();
  if (shm_ != nullptr) return Settle(shm_->Broadcast(send, recv, bytes, root, Wait()));
  if (bytes <= DirectBytes()) {
    // The root sends to each peer on tag k = its distance - 1.
    std::vector<Transfer> v;
    const int pos = (rank() - root + size()) % size();
    for (int k = 0; k + 1 < size(); ++k) {
      if (rank() != root && k != pos - 1) continue;
      Transfer x;
      if (rank() == root) {
        x.to = (root + k + 1) % size();
        x.send = send;
        x.send_bytes = bytes;
      } else {
        x.from = root;
        x.recv = recv;
        x.recv_bytes = bytes;
      }
      x.tag = k;
      v.push_back(x);
    }
    DirectSchedule s(std::move(v));
    return Run(s, s.window());
  }
  ChainSchedule chain(send, recv, bytes, root, rank(), size(), SegmentBytes());
  return Run(chain, tuning_.window);
}

}  // namespace mpi
}  // namespace weft

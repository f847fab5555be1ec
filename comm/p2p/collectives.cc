#include "comm/p2p/collectives.h"

#include <cstring>
#include <utility>
#include <vector>

#include "comm/p2p/ring.h"
#include "core/reduce.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

class DisseminationSchedule final : public Schedule {
 public:
  DisseminationSchedule(int rank, int size) : rank_(rank), size_(size) {
    while ((1 << steps_) < size) ++steps_;
  }
  size_t lanes() const override { return 1; }
  int steps() const override { return steps_; }
  Transfer Post(size_t, int, int step) override {
    const int d = 1 << step;
    Transfer x;
    x.to = (rank_ + d) % size_;
    x.from = (rank_ - d + size_) % size_;
    x.send = &out_;
    x.recv = &in_;
    x.send_bytes = x.recv_bytes = 1;
    x.tag = step;
    return x;
  }
  void Complete(size_t, int, int) override {}

 private:
  const int rank_, size_;
  int steps_ = 0;
  unsigned char out_ = 0, in_ = 0;
};

absl::Status RunDirect(const Engine& e, std::vector<Transfer> v) {
  DirectSchedule s(std::move(v));
  return e.run(s, s.window());
}

}  // namespace

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

absl::Status AllReduce(const Engine& e, const void* send, void* recv, size_t count, DataType t, RedOp op) {
  const size_t es = ElementSize(t), bytes = count * es;
  if (e.size == 1 || count == 0) {  // avg over one rank is the value itself
    CopyIfDistinct(recv, send, bytes);
    return absl::OkStatus();
  }
  if (bytes <= e.direct_bytes) {
    // Peers' inputs land in scratch at their rank's position.
    const size_t peers = AlignUp(bytes * static_cast<size_t>(e.size));
    auto* scratch = static_cast<unsigned char*>(e.scratch(peers + count * AccumSize(t)));
    RETURN_IF_ERROR(RunDirect(e, PeerExchange(e.rank, e.size, bytes, [&](int) { return send; },
                                              [&](int from) { return scratch + static_cast<size_t>(from) * bytes; })));
    auto src = [&](int q) -> const void* { return q == e.rank ? send : scratch + static_cast<size_t>(q) * bytes; };
    ReduceInRankOrder(t, op, e.size, src, count, scratch + peers, recv);
    return absl::OkStatus();
  }
  RingSchedule::Args a{t, op, e.rank, e.size, true, true, send, nullptr, recv, count, 0, e.segment_bytes, e.window};
  RingSchedule ring(a, e.scratch(RingSchedule::ScratchBytes(a)));
  return e.run(ring, e.window);
}

absl::Status ReduceScatter(const Engine& e, const void* send, void* recv, size_t recvcount, DataType t, RedOp op) {
  const size_t block = recvcount * ElementSize(t);
  const auto* in = static_cast<const unsigned char*>(send);
  if (e.size == 1 || recvcount == 0) {
    CopyIfDistinct(recv, send, block);
    return absl::OkStatus();
  }
  if (block <= e.direct_bytes) {
    const size_t blocks = AlignUp(block * static_cast<size_t>(e.size));
    auto* scratch = static_cast<unsigned char*>(e.scratch(blocks + recvcount * AccumSize(t)));
    RETURN_IF_ERROR(RunDirect(e, PeerExchange(e.rank, e.size, block,
                                              [&](int to) { return in + static_cast<size_t>(to) * block; },
                                              [&](int from) { return scratch + static_cast<size_t>(from) * block; })));
    auto src = [&](int q) -> const void* { return (q == e.rank ? in : scratch) + static_cast<size_t>(q) * block; };
    ReduceInRankOrder(t, op, e.size, src, recvcount, scratch + blocks, recv);
    return absl::OkStatus();
  }
  RingSchedule::Args a{t, op, e.rank, e.size, true, false, send, recv, nullptr, 0, recvcount, e.segment_bytes,
                       e.window};
  RingSchedule ring(a, e.scratch(RingSchedule::ScratchBytes(a)));
  return e.run(ring, e.window);
}

absl::Status AllGather(const Engine& e, const void* send, void* recv, size_t sendcount, DataType t) {
  const size_t block = sendcount * ElementSize(t);
  auto* out = static_cast<unsigned char*>(recv);
  CopyIfDistinct(out + static_cast<size_t>(e.rank) * block, send, block);
  if (e.size == 1 || sendcount == 0) return absl::OkStatus();
  if (block <= e.direct_bytes) {
    return RunDirect(e, PeerExchange(e.rank, e.size, block, [&](int) { return send; },
                                     [&](int from) { return out + static_cast<size_t>(from) * block; }));
  }
  RingSchedule::Args a{t, RedOp::kSum, e.rank, e.size, false, true, nullptr, nullptr, recv, 0, sendcount,
                       e.segment_bytes, e.window};
  RingSchedule ring(a, nullptr);
  return e.run(ring, e.window);
}

absl::Status Broadcast(const Engine& e, const void* send, void* recv, size_t bytes, int root) {
  if (e.rank == root) CopyIfDistinct(recv, send, bytes);
  if (e.size == 1 || bytes == 0) return absl::OkStatus();
  if (bytes <= e.direct_bytes) {
    // The root sends to each peer on tag k = its distance - 1.
    std::vector<Transfer> v;
    const int pos = (e.rank - root + e.size) % e.size;
    for (int k = 0; k + 1 < e.size; ++k) {
      if (e.rank != root && k != pos - 1) continue;
      Transfer x;
      if (e.rank == root) {
        x.to = (root + k + 1) % e.size;
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
    return RunDirect(e, std::move(v));
  }
  ChainSchedule chain(send, recv, bytes, root, e.rank, e.size, e.segment_bytes);
  return e.run(chain, e.window);
}

absl::Status Barrier(const Engine& e) {
  if (e.size == 1) return absl::OkStatus();
  DisseminationSchedule s(e.rank, e.size);
  return e.run(s, 1);
}

}  // namespace p2p
}  // namespace weft
